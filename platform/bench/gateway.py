"""`loraplex bench gateway`: the same streaming load sent to the engine directly and through
the gateway, interleaved in one run, at 1, 16 and 64 concurrent streams.

Prints tokens/s and TTFT p50/p99 for both paths and their ratio, and writes JSON. With
`--compare-lane` a second gateway process with the relay's load measures off (the priority
lane and write pacing, `gateway/lane.py`) is measured in the same run, interleaved, as the
baseline of what they change. Two more
columns say where added TTFT goes: the gateway's own share as it measured it
(`loraplex_gateway_overhead_seconds`), and the engine's own TTFT p50 on each path (vLLM's
`time_to_first_token_seconds`): what remains is the extra HTTP hop and CPU contention. Both paths
use the same client code, prompt, greedy sampling and output length, so the difference is
what the gateway costs (on this 2-core machine every gateway cycle is taken from the engine).
Every request forbids the dev model's partial-character tokens (`logit_bias`), which the
engines would otherwise hold back, stalling a stream for a random length of time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import aiohttp
import click
import httpx
import msgspec

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.bench.api import operator_key
from loraplex.bench.proc_cpu import cpu_seconds
from loraplex.bench.scrape import Buckets, quantile, read_histogram
from loraplex.bench.server import api_process, without_shedding
from loraplex.bench.tenants import register_engine
from loraplex.dev.partial_characters import steady_stream_bias
from loraplex.serving.engines.http_driver import iter_sse_data
from loraplex.serving.engines.launcher import EngineConfig, start_engine
from loraplex.settings import Settings

PROMPT = [{"role": "user", "content": "Once upon a time"}]
NO_LANE = "gateway, plain relay"  # lane and pacing off
JSON = {"content-type": "application/json"}


@dataclass
class Round:
    """One load level on one path."""

    path: str
    streams: int
    requests: int
    tokens: int
    seconds: float
    ttfts: list[float]
    server_cpu_s: float = float("nan")  # CPU the gateway process spent (gateway path only)
    # The gateway's own TTFT share, p50 in ms, as it measured it (gateway path only).
    overhead_p50_ms: float = float("nan")
    # The engine's own TTFT p50 for this round's requests (vLLM's histogram), both paths: what
    # the engine took apart from either path's HTTP hops.
    engine_ttft_p50_ms: float = float("nan")

    @property
    def tokens_per_s(self) -> float:
        """Completion tokens per second over the round."""
        return self.tokens / self.seconds

    def ttft(self, q: float) -> float:
        """TTFT quantile in milliseconds."""
        ordered = sorted(self.ttfts)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _one(
    client: aiohttp.ClientSession, url: str, headers: dict[str, str], body: bytes
) -> tuple[float, int]:
    """One streamed request: its TTFT (first text chunk) and its completion tokens."""
    started = time.perf_counter()
    ttft, tokens = None, 0
    async with client.post(url, data=body, headers={**headers, **JSON}) as response:
        if response.status != 200:
            raise click.ClickException(
                f"{url}: {response.status} {(await response.read())[:300]!r}"
            )
        async for data in iter_sse_data(response.content.iter_any()):
            if ttft is None and b'"content":"' in data and b'"content":""' not in data:
                ttft = time.perf_counter() - started
            if b'"usage":{' in data:
                tokens = msgspec.json.decode(data)["usage"]["completion_tokens"]
    return ttft if ttft is not None else time.perf_counter() - started, tokens


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds of a process so far (Linux /proc, bench/proc_cpu.py); NaN when unknown."""
    used = cpu_seconds(pid) if pid is not None else None
    return float("nan") if used is None else used


async def _round(
    path: str,
    url: str,
    headers: dict[str, str],
    model: str,
    streams: int,
    requests: int,
    max_tokens: int,
    server_pid: int | None = None,
    stagger_s: float = 0.0,
    metrics_url: str | None = None,
    engine_url: str | None = None,
    engine_kind: str = "sglang",
    logit_bias: dict[str, float] | None = None,
) -> Round:
    body = msgspec.json.encode(
        {
            "model": model,
            "messages": PROMPT,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **({"logit_bias": logit_bias} if logit_bias else {}),
        }
    )
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    results: list[tuple[float, int]] = []
    # aiohttp, like the gateway's engine client: on 2 cores the load generator's own CPU per
    # event competes with both paths' servers, and httpx's is several times aiohttp's.
    connector = aiohttp.TCPConnector(limit=streams + 8, keepalive_timeout=2.0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def worker(start_after: float) -> None:
            await asyncio.sleep(start_after)
            while not queue.empty():
                queue.get_nowait()
                results.append(await _one(client, url, headers, body))

        overhead, engine_ttft = _overhead(metrics_url), _engine_ttft(engine_url, engine_kind)
        cpu_before, started = process_cpu_s(server_pid), time.perf_counter()
        await asyncio.gather(*(worker(stagger_s * i / streams) for i in range(streams)))
        seconds = time.perf_counter() - started
    return Round(
        path,
        streams,
        requests,
        sum(t for _, t in results),
        seconds,
        [f for f, _ in results],
        process_cpu_s(server_pid) - cpu_before,
        1000 * quantile(overhead, _overhead(metrics_url), 0.5) if metrics_url else math.nan,
        1000 * quantile(engine_ttft, _engine_ttft(engine_url, engine_kind), 0.5)
        if engine_url
        else math.nan,
    )


def _histogram(url: str | None, name: str, **labels: str) -> Buckets:
    """Histogram `name` as the server at `url` has it now (empty without a URL)."""
    return read_histogram(url, name, **labels) if url is not None else {}


def _overhead(metrics_url: str | None) -> Buckets:
    """The gateway's `total` overhead histogram now."""
    return _histogram(metrics_url, "loraplex_gateway_overhead_seconds", phase="total")


# Each engine's own TTFT histogram; SGLang keeps streamed and unstreamed requests apart.
ENGINE_TTFT = {
    "vllm": ("vllm:time_to_first_token_seconds", {}),
    "sglang": ("sglang:time_to_first_token_seconds", {"is_streaming": "true"}),
}


def _engine_ttft(engine_url: str | None, kind: str) -> Buckets:
    """The engine's own TTFT histogram now."""
    name, labels = ENGINE_TTFT[kind]
    return _histogram(engine_url, name, **labels)


def _setup(url: str, operator: str, engine: EngineConfig, served: str) -> str:
    facts = {
        **facts_to_json(read_base_model_facts(engine.model_dir)),
        "name": served,
        "source": str(engine.model_dir.resolve()),
    }
    key = register_engine(
        url,
        operator,
        facts,
        {
            "name": f"bench-{secrets.token_hex(3)}",
            "url": engine.url,
            "kind": engine.kind,
            "base_model": served,
            "max_lora_rank": engine.max_lora_rank,
            "gpu_slots": engine.max_loras,
            "host_slots": engine.max_cpu_loras,
        },
    )
    _wait_in_rotation(url, key, served)
    return key


def _wait_in_rotation(url: str, key: str, served: str) -> None:
    """Until the gateway at `url` has the engine in rotation (its health poller's first round)."""
    for _ in range(120):
        probe = httpx.post(
            f"{url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": served, "messages": PROMPT, "max_tokens": 1},
            timeout=60,
        )
        if probe.status_code == 200:
            return
        time.sleep(0.5)
    raise click.ClickException(f"gateway never served the engine: {probe.text}")


KIND_OPTION = click.option(
    "--kind",
    type=click.Choice(sorted(ENGINE_TTFT)),
    default="sglang",
    show_default=True,
    help="the engine to measure (started or reused through `loraplex engine start`)",
)


@click.command("gateway")
@KIND_OPTION
@click.option("--streams", default="1,16,64", show_default=True)
@click.option("--max-tokens", default=64, show_default=True)
@click.option(
    "--rounds", default=2, show_default=True, help="interleaved rounds per path and level"
)
@click.option(
    "--stagger-s",
    default=0.5,
    show_default=True,
    help="spread the streams' first requests over this long (0: all at once, in lockstep)",
)
@click.option(
    "--compare-lane",
    is_flag=True,
    help="also measure a gateway with the relay's load measures off (priority lane, write "
    "pacing), interleaved, as its baseline",
)
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("var/bench/gateway.json")
)
@click.pass_obj
def bench_gateway(
    settings: Settings,
    kind: str,
    streams: str,
    max_tokens: int,
    rounds: int,
    stagger_s: float,
    compare_lane: bool,
    json_path: Path,
) -> None:
    """Engine direct vs through the gateway: tokens/s and TTFT at several concurrencies."""
    engine = EngineConfig(kind=kind)
    info = start_engine(engine, say=lambda line: click.echo(f"[engine] {line}", err=True))
    operator = operator_key(settings)
    bias = steady_stream_bias(Path(info.model_dir))
    # Admission shedding off: this measures what the relay costs, not load shedding.
    measured = without_shedding(settings)
    with contextlib.ExitStack() as stack:
        url, api_pid = stack.enter_context(api_process(measured.to_env()))
        key = _setup(url, operator, engine, info.served_model)
        results: list[Round] = []
        # Per path: where to send, headers, the HTTP server whose CPU is counted (the
        # engine's own OpenAI frontend process, or the gateway), and where the gateway
        # publishes its own overhead histogram.
        auth = {"Authorization": f"Bearer {key}"}
        paths = {
            "direct": (f"{engine.url}/v1/chat/completions", {}, info.pid, None),
            "gateway": (f"{url}/v1/chat/completions", auth, api_pid, url),
        }
        if compare_lane:
            no_lane = replace(measured, relay_yield_to_new_s=0.0, relay_pace_s=0.0)
            url_2, pid_2 = stack.enter_context(api_process(no_lane.to_env()))
            paths[NO_LANE] = (f"{url_2}/v1/chat/completions", auth, pid_2, url_2)
            _wait_in_rotation(url_2, key, info.served_model)
        for level in [int(s) for s in streams.split(",")]:
            # vLLM's CPU engine compiles kernels for batch sizes it has not run yet: one
            # unmeasured wave per path and level, so neither path pays that in its numbers.
            for target, headers, _, _ in paths.values():
                asyncio.run(
                    _round(
                        "warm-up",
                        target,
                        headers,
                        info.served_model,
                        level,
                        level,
                        max_tokens,
                        logit_bias=bias,
                    )
                )
            requests = max(8, level * 3)
            for _ in range(rounds):
                for name, (target, headers, pid, metrics_url) in paths.items():
                    round_ = _round(
                        name,
                        target,
                        headers,
                        info.served_model,
                        level,
                        requests,
                        max_tokens,
                        pid,
                        stagger_s if level > 1 else 0.0,
                        metrics_url,
                        engine.url,
                        kind,
                        bias,
                    )
                    results.append(asyncio.run(round_))
    table = _table(results)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(
        json.dumps({"kind": kind, "rows": table, "rounds": [asdict(r) for r in results]}, indent=2)
    )


def _table(results: list[Round]) -> list[dict[str, float]]:
    """One row per concurrency and gateway path, each against the engine direct."""
    rows = []
    click.echo(
        f"{'streams':>7} {'path':>16} {'direct tok/s':>12} {'path tok/s':>10} {'kept':>6} "
        f"{'TTFT p50 direct':>15} {'path':>8} {'added':>7} "
        f"{'TTFT p99 direct':>15} {'path':>8} {'server CPU µs/token direct':>26} {'path':>8} "
        f"{'gateway own p50':>15} {'engine TTFT p50 direct':>22} {'path':>8}"
    )
    med = statistics.median
    for level in sorted({r.streams for r in results}):
        direct = [r for r in results if r.streams == level and r.path == "direct"]
        d_tps = med(r.tokens_per_s for r in direct)
        d50, d99 = med(r.ttft(0.5) for r in direct), med(r.ttft(0.99) for r in direct)
        d_cpu = med(1e6 * r.server_cpu_s / max(r.tokens, 1) for r in direct)
        d_eng = med(r.engine_ttft_p50_ms for r in direct)
        for path in ("gateway", NO_LANE):
            via = [r for r in results if r.streams == level and r.path == path]
            if not via:
                continue
            g_tps = med(r.tokens_per_s for r in via)
            g50, g99 = med(r.ttft(0.5) for r in via), med(r.ttft(0.99) for r in via)
            g_cpu = med(1e6 * r.server_cpu_s / max(r.tokens, 1) for r in via)
            own, g_eng = med(r.overhead_p50_ms for r in via), med(r.engine_ttft_p50_ms for r in via)
            rows.append(
                {
                    "streams": level,
                    "path": path,
                    "engine_frontend_cpu_us_per_token": d_cpu,
                    "gateway_cpu_us_per_token": g_cpu,
                    "direct_tok_s": d_tps,
                    "gateway_tok_s": g_tps,
                    "ratio": g_tps / d_tps,
                    "ttft_p50_direct_ms": d50,
                    "ttft_p50_gateway_ms": g50,
                    "ttft_p50_added_ms": g50 - d50,
                    "ttft_p99_direct_ms": d99,
                    "ttft_p99_gateway_ms": g99,
                    "gateway_own_overhead_p50_ms": own,
                    "engine_ttft_p50_direct_ms": d_eng,
                    "engine_ttft_p50_gateway_ms": g_eng,
                }
            )
            click.echo(
                f"{level:7d} {path:>16} {d_tps:12.0f} {g_tps:10.0f} {g_tps / d_tps:5.2f}x "
                f"{d50:13.1f}ms {g50:6.1f}ms "
                f"{g50 - d50:+6.1f} {d99:13.1f}ms {g99:6.1f}ms {d_cpu:26.0f} {g_cpu:8.0f} "
                f"{own:13.1f}ms {d_eng:20.1f}ms {g_eng:6.1f}ms"
            )
    return rows
