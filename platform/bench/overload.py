"""`loraplex bench overload`: goodput and admitted TTFT under 0.5x-4x of measured capacity,
with admission control on and off, plus a noisy-neighbour run — all in one run.

Capacity is measured first: a closed loop at the engine's best concurrency, found by a
search and then measured again on its own, so the search's luckiest level does not inflate
it; then, from that closed loop's rate, the highest open-loop (Poisson) rate whose p99 TTFT
holds the SLO, in steps of 1.25x, measured once more with other arrival times (the search
took its luckiest run); where that measurement misses the SLO, the next step down is
measured, until one holds. That measurement's goodput is the capacity: the levels
offer Poisson arrivals, burstier than a closed loop's, so "2x capacity" is twice a rate of
the same kind of load that the engine was seen to sustain. Then an open-loop Poisson load
at each multiple is offered to two API processes on the same engine: one caps what runs on
the engine and sheds past it (admission on), one admits everything (off).
The "on" process runs the admission core with the engine profile of `--profile` (by default
the reference profile of the engine's kind: `LORAPLEX_ADMISSION_PROFILES`); the concurrency
the capacity search found is only reported, never given to it (`--fixed-cap` gives it as a
fixed number of places, for a comparison).

Goodput is what it usually means in serving: requests per second that completed *and* met
the TTFT SLO (2x the unloaded p99), counted over the measurement window: for a closed loop,
the requests that ended within it; for an open loop, every request that arrived in it (the
run waits for them all). Dividing by the window and not by the time the last request took
to end matters: with a 10 s window the drain at the end understated open-loop goodput, and
the requests still running at a closed loop's deadline overstated capacity, by ~7% each.
`done/s` counts completions regardless of the SLO. A load level runs until
`LEVEL_MIN_REQUESTS` arrived (within `LEVEL_MAX_SECONDS`), so its p99 is not one request.
Each row also has the share of CPU time the hypervisor stole while it ran
(`loraplex.bench.steal`): the host's noise, beside the figures it may have spoiled.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiohttp
import click
import httpx
from prometheus_client.parser import text_string_to_metric_families

from loraplex.bench.api import operator_key
from loraplex.bench.gateway import KIND_OPTION, _setup
from loraplex.bench.proc_cpu import cpu_between, cpu_seconds
from loraplex.bench.scrape import metrics_text
from loraplex.bench.server import api_process, without_shedding
from loraplex.bench.steal import CpuTimes, steal_share
from loraplex.bench.tenants import tenant_key
from loraplex.dev.partial_characters import steady_stream_bias
from loraplex.observability.gc_pauses import freeze_the_startup_heap
from loraplex.serving.engines.http_driver import iter_sse_data, samples_named
from loraplex.serving.engines.launcher import EngineConfig, EngineInfo, start_engine
from loraplex.settings import Settings

PROMPT = [{"role": "user", "content": "Once upon a time"}]
# The unloaded TTFT, the yardstick of every SLO here, is measured on requests this short:
# an idle engine's TTFT does not depend on how long the reply will be, and short requests
# give ~10x the samples in the same time. With full-length ones its p99 was the slowest of
# ~90 requests, one stall of the host, and it ranged 39-118 ms between runs.
UNLOADED_MAX_TOKENS = 2
UNLOADED_TRIES, UNLOADED_MAX_STEAL = 3, 0.05
# A pass whose p99 is over this multiple of its median caught a stall of the host: one run's
# was 203 ms against a median of 30 (others' 45-46 against 27-28), which set an SLO of
# 405 ms and a capacity of 30 requests/s whose median TTFT was 167 ms.
UNLOADED_MAX_TAIL = 3.0
# Before it is measured, each API process serves this many streams for this long: its
# first requests at a new concurrency paid for cold caches and connections (measured: the
# first level after a fresh start had a p99 4x the next one's).
WARM_UP_S, WARM_UP_STREAMS = 3.0, 16
# A load level lasts long enough for this many arrivals (at most this long): the p99 of
# fewer than 100 requests is their slowest one, and on a slow phase (3.7 requests/s of
# capacity) a 10-s level at 2x admitted 58, so one request caught by a stall decided it.
LEVEL_MIN_REQUESTS, LEVEL_MAX_SECONDS = 200, 30.0
# The open-loop capacity search's steps: x1.25 up or down from the closed loop's rate.
RATE_STEP, RATE_STEPS = 1.25, 3
UNLIMITED = {
    "requests_per_minute": 100_000,
    "tokens_per_minute": 10_000_000,
    "concurrent_requests": 1_000,
    "concurrent_streams": 1_000,
    "daily_tokens": 1_000_000_000,
}


@dataclass
class Outcome:
    """What a batch of requests saw."""

    seconds: float  # the measurement window
    ttfts: list[float] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)  # perf_counter when each one ended
    started: list[float] = field(default_factory=list)  # ... and when it was sent
    refused: dict[str, int] = field(default_factory=dict)  # "503 overloaded" -> how many
    refused_at: list[tuple[float, str]] = field(default_factory=list)  # (sent, why) of each
    failed: int = 0
    steal: float = float("nan")  # share of the machine's CPU the hypervisor took meanwhile
    elapsed: float = 0.0  # wall seconds from the first request to the last one's end

    def arrived(self) -> int:
        """Requests sent: completed, refused or failed."""
        return len(self.ttfts) + sum(self.refused.values()) + self.failed

    def refused_with(self, status: int) -> int:
        """Requests refused with HTTP `status`, whatever the code."""
        return sum(n for why, n in self.refused.items() if why.split()[0] == str(status))

    def p(self, q: float) -> float:
        """TTFT quantile of completed requests, in ms."""
        if not self.ttfts:
            return float("nan")
        ordered = sorted(self.ttfts)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def done(self) -> float:
        """Completed requests per second of the window."""
        return len(self.ttfts) / self.seconds

    def goodput(self, slo_ms: float) -> float:
        """Completed requests whose TTFT met `slo_ms`, per second of the window."""
        return sum(1000 * t <= slo_ms for t in self.ttfts) / self.seconds

    def timeline(self) -> list[tuple[float, float]]:
        """Each completed request's start (seconds from the first one's) and TTFT (ms), in
        the order they started: to tell a stall (slow requests waiting at the same time)
        from a queue (slow ones spread through the level)."""
        if not self.started:
            return []
        first = self._first_sent()
        return sorted(
            (round(at - first, 3), round(1000 * t, 1))
            for at, t in zip(self.started, self.ttfts, strict=True)
        )

    def refusals(self) -> list[tuple[float, str]]:
        """Each refused request's start, on `timeline`'s clock, and why it was refused: a
        neighbour's refusals cost the API work too, and a timeline of completed requests
        alone cannot place them."""
        if not self.refused_at:
            return []
        first = self._first_sent()
        return sorted((round(at - first, 3), why) for at, why in self.refused_at)

    def _first_sent(self) -> float:
        return min([*self.started, *(at for at, _ in self.refused_at)])

    def slow_spells(self, slo_ms: float) -> list[tuple[float, int]]:
        """The requests over `slo_ms`, grouped into spells of overlapping waits for a first
        token: each spell's start (seconds) and how many it holds. One spell holding several
        is one stall; many spells of one are a tail spread through the level."""
        spells: list[tuple[float, int]] = []
        until = -1.0
        for at, ttft_ms in self.timeline():
            if ttft_ms <= slo_ms:
                continue
            if spells and at <= until:
                spells[-1] = (spells[-1][0], spells[-1][1] + 1)
            else:
                spells.append((at, 1))
            until = max(until, at + ttft_ms / 1000)
        return spells

    def ended_by(self, deadline: float) -> Outcome:
        """Only the requests that ended by `deadline` (a closed loop's window)."""
        kept = [i for i, end in enumerate(self.ended) if end <= deadline]
        return Outcome(
            self.seconds,
            ttfts=[self.ttfts[i] for i in kept],
            ended=[self.ended[i] for i in kept],
            started=[self.started[i] for i in kept],
            refused=self.refused,
            refused_at=self.refused_at,
            failed=self.failed,
            steal=self.steal,
        )


async def _request(
    client: aiohttp.ClientSession,
    url: str,
    key: str,
    max_tokens: int,
    out: Outcome,
    logit_bias: dict[str, float] | None = None,
) -> None:
    body = {
        "model": "loraplex-tiny",
        "messages": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        **({"logit_bias": logit_bias} if logit_bias else {}),
    }
    started = time.perf_counter()
    try:
        async with client.post(
            f"{url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
        ) as response:
            if response.status != 200:
                why = f"{response.status} {_error_code(await response.read())}"
                out.refused[why] = out.refused.get(why, 0) + 1
                out.refused_at.append((started, why))
                return
            ttft = None
            async for data in iter_sse_data(response.content.iter_any()):
                if ttft is None and b'"content":"' in data and b'"content":""' not in data:
                    ttft = time.perf_counter() - started
                if b'"error"' in data:
                    out.failed += 1
                    return
            out.ttfts.append(ttft if ttft is not None else time.perf_counter() - started)
            out.ended.append(time.perf_counter())
            out.started.append(started)
    except (aiohttp.ClientError, TimeoutError, OSError):  # counted; never ends the run
        out.failed += 1


def _client(connections: int) -> aiohttp.ClientSession:
    """The load generator's HTTP client: aiohttp, like bench gateway's. On 2 cores its own
    CPU per event competes with the API and the engine, and httpx's is several times
    aiohttp's: the tail it measured was partly its own."""
    connector = aiohttp.TCPConnector(limit=connections, keepalive_timeout=2.0)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300))


def _error_code(body: bytes) -> str:
    """The OpenAI-style `error.code` of a refusal, so a table says which limit refused."""
    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


async def open_loop(
    url: str,
    key: str,
    rate: float,
    seconds: float,
    max_tokens: int,
    seed: int = 0,
    *,
    logit_bias: dict[str, float] | None = None,
) -> Outcome:
    """Poisson arrivals at `rate`/s for `seconds`; waits for every request to end.

    Every request arrived within the window, so `seconds` stays the window.
    """
    rng = random.Random(seed)
    out, before = Outcome(seconds), CpuTimes.now()
    async with _client(1000) as client:
        tasks, started = [], time.perf_counter()
        next_at = 0.0
        while next_at < seconds:
            await asyncio.sleep(max(0.0, started + next_at - time.perf_counter()))
            tasks.append(
                asyncio.create_task(_request(client, url, key, max_tokens, out, logit_bias))
            )
            next_at += rng.expovariate(rate)
        await asyncio.gather(*tasks)
        out.elapsed = time.perf_counter() - started
    out.steal = steal_share(before, CpuTimes.now())
    return out


async def closed_loop(
    url: str,
    key: str,
    streams: int,
    seconds: float,
    max_tokens: int,
    *,
    logit_bias: dict[str, float] | None = None,
) -> Outcome:
    """`streams` clients back to back for `seconds`: the throughput the engine sustains.

    Counts the requests that ended within the window; the ones still running at its end
    are waited for (so the next level starts on an idle engine) but not counted.
    """
    out, before = Outcome(seconds), CpuTimes.now()
    deadline = time.perf_counter() + seconds
    async with _client(streams + 4) as client:

        async def worker() -> None:
            while time.perf_counter() < deadline:
                await _request(client, url, key, max_tokens, out, logit_bias)

        await asyncio.gather(*(worker() for _ in range(streams)))
    out.steal = steal_share(before, CpuTimes.now())
    return out.ended_by(deadline)


@click.command("overload")
@KIND_OPTION
@click.option("--seconds", default=12.0, show_default=True, help="per load level")
@click.option("--max-tokens", default=32, show_default=True)
@click.option(
    "--fixed-cap",
    is_flag=True,
    help="Admission on with fixed places at the searched concurrency, not the profile's.",
)
@click.option(
    "--profile",
    default="",
    help="The engine profile admission sizes its places from (name or path; default: "
    "the reference profile of --kind on CPU).",
)
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("var/bench/overload.json")
)
@click.pass_obj
def bench_overload(
    settings: Settings,
    kind: str,
    seconds: float,
    max_tokens: int,
    fixed_cap: bool,
    profile: str,
    json_path: Path,
) -> None:
    """Goodput and admitted p99 TTFT at 0.5x, 1x, 2x, 4x capacity, admission on vs off."""
    if not settings.redis_url:
        click.echo(
            "note: admission runs on the in-process Redis stand-in (LORAPLEX_REDIS_URL unset); "
            "set it to a real Redis for figures like production's",
            err=True,
        )
    engine = EngineConfig(kind=kind)
    info = start_engine(engine, say=lambda line: click.echo(f"[engine] {line}", err=True))
    rows = _measure(settings, engine, info, seconds, max_tokens, fixed_cap, profile)
    _print(rows)
    _print_targets(rows)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(rows, indent=2))


def _measure(
    settings: Settings,
    engine: EngineConfig,
    info: EngineInfo,
    seconds: float,
    max_tokens: int,
    fixed_cap: bool,
    profile: str = "",
) -> list[dict]:
    """Capacity, then each load level with admission off and on, then the noisy neighbour."""
    operator = operator_key(settings)
    # The load generator is the measuring instrument: a collection of its start-up heap
    # would hold back the first tokens it times (as in the API process, gc_pauses).
    freeze_the_startup_heap()
    # The dev model's partial characters would stall streams at random (bench gateway).
    bias = steady_stream_bias(Path(info.model_dir))
    # The TTFT-estimate shedding is off in both: the cap (or nothing) is what is compared.
    with api_process(without_shedding(settings).to_env()) as (off_url, off_pid):
        _setup(off_url, operator, engine, info.served_model)
        # The load comes from a normal-priority (pro) tenant whose quotas are lifted: the
        # engine cap applies to it exactly (enterprise may use 1.2x), and no 429 mixes in.
        key = tenant_key(off_url, operator, **UNLIMITED)
        asyncio.run(
            closed_loop(off_url, key, WARM_UP_STREAMS, WARM_UP_S, max_tokens, logit_bias=bias)
        )
        unloaded = _unloaded(off_url, key, 2 * seconds, bias)
        slo_ms = 2 * unloaded.p(0.99)
        streams, searched = _slo_capacity(off_url, key, seconds, max_tokens, slo_ms, bias)
        # The search keeps the best of several noisy levels, which overstates what that
        # level sustains (the winner's curse): that level is measured once more.
        closed = asyncio.run(
            closed_loop(off_url, key, streams, seconds, max_tokens, logit_bias=bias)
        )
        # The levels offer Poisson arrivals, burstier than a closed loop's: capacity is the
        # open-loop rate that holds the SLO, searched from the closed loop's.
        offered, held = _open_loop_capacity(
            off_url, key, closed.goodput(slo_ms), seconds, max_tokens, slo_ms, bias
        )
        # The rate taken is the search's luckiest, as with the closed loop: measured again,
        # with other arrival times, it must hold the SLO again to be the capacity.
        offered, capacity, held = _confirmed(
            off_url, key, offered, held, seconds, max_tokens, slo_ms, bias
        )
        rate = capacity.goodput(slo_ms)
        if not held:
            click.echo(
                f"note: no open-loop rate tried held the SLO (in the search, then measured "
                f"again); capacity is the goodput at the last one ({offered:.2f}/s offered)",
                err=True,
            )
        rows = [
            _row(f"unloaded@{UNLOADED_MAX_TOKENS}tok", unloaded, slo_ms),
            {
                **_row(f"closed@{streams}", closed, slo_ms),
                "searched": searched.goodput(slo_ms),
            },
            {
                **_row(f"capacity@{offered:.1f}/s", capacity, slo_ms),
                "offered": offered,
                "held_slo_in_search": held,
            },
        ]
        click.echo(
            f"capacity {rate:.2f} req/s, offered {offered:.2f}/s in an open loop (p99 TTFT "
            f"within {slo_ms:.0f} ms = 2x unloaded); a closed loop of {streams} streams gave "
            f"{closed.goodput(slo_ms):.2f} (its search's best run {searched.goodput(slo_ms):.2f})",
            err=True,
        )
        admission_on = replace(
            settings,
            admission_ttft_budget_s=1e9,
            engine_max_in_flight=streams if fixed_cap else 0,
            engine_admission=True,
            admission_profiles=f"{engine.kind}={profile or f'{engine.kind}-cpu'}",
        )
        with api_process(admission_on.to_env()) as (on_url, on_pid):
            # A process's first requests pay for its cold caches and connections; the "off"
            # process paid during the capacity search, this one pays here, unmeasured.
            asyncio.run(
                closed_loop(on_url, key, WARM_UP_STREAMS, WARM_UP_S, max_tokens, logit_bias=bias)
            )
            state = _cap_state(on_url, operator, engine.url)  # after the warm-up's sheds
            for factor in (0.5, 1.0, 2.0, 4.0):
                for mode, url, pid in (("off", off_url, off_pid), ("on", on_url, on_pid)):
                    api_cpu, api_gc = cpu_seconds(pid), _gc_paused(url)
                    level_s = _level_seconds(seconds, factor * rate)
                    out = asyncio.run(
                        open_loop(url, key, factor * rate, level_s, max_tokens, logit_bias=bias)
                    )
                    row = {
                        **_row(f"{factor}x", out, slo_ms),
                        "admission": mode,
                        "offered": factor * rate,
                        "goodput_vs_capacity": out.goodput(slo_ms) / rate,
                        "p99_vs_unloaded": out.p(0.99) / unloaded.p(0.99),
                        **_api_cpu(out, cpu_between(api_cpu, cpu_seconds(pid))),
                        **_api_gc(api_gc, _gc_paused(url)),
                        "slow_spells": out.slow_spells(slo_ms),
                        "requests": out.timeline(),
                    }
                    if mode == "on":
                        state = _cap_state(url, operator, engine.url, state)
                        row.update(state)
                    rows.append(row)
            rows.extend(
                _noisy_neighbour(
                    on_url, operator, seconds, max_tokens, rate, slo_ms, bias, engine.url
                )
            )
    return rows


def _level_seconds(seconds: float, rate: float) -> float:
    """How long a load level offering `rate` runs: long enough for `LEVEL_MIN_REQUESTS`
    arrivals, within `LEVEL_MAX_SECONDS`, and never shorter than `seconds`."""
    return max(seconds, min(LEVEL_MAX_SECONDS, LEVEL_MIN_REQUESTS / rate))


def _unloaded(url: str, key: str, seconds: float, bias: dict[str, float]) -> Outcome:
    """The yardstick: one short request at a time. Measured again (up to
    `UNLOADED_TRIES` times, keeping the pass with the shortest p99) while a pass was
    disturbed: every SLO in the run is twice its p99, and one measured under 12% steal was
    89 ms against 76-79 ms in runs without."""
    tries: list[Outcome] = []
    while len(tries) < UNLOADED_TRIES:
        out = asyncio.run(closed_loop(url, key, 1, seconds, UNLOADED_MAX_TOKENS, logit_bias=bias))
        tries.append(out)
        if not _disturbed(out):
            break
    return min(tries, key=lambda o: o.p(0.99))


def _disturbed(out: Outcome) -> bool:
    """Whether an unloaded pass measured the host rather than the engine: the hypervisor
    took more than `UNLOADED_MAX_STEAL` of the CPU, or its p99 is a stall (over
    `UNLOADED_MAX_TAIL` times its median)."""
    stolen = out.steal > UNLOADED_MAX_STEAL  # NaN (not Linux): nothing to go by
    return stolen or out.p(0.99) > UNLOADED_MAX_TAIL * out.p(0.5)


def _slo_capacity(
    url: str, key: str, seconds: float, max_tokens: int, slo_ms: float, bias: dict[str, float]
) -> tuple[int, Outcome]:
    """The highest closed-loop throughput whose p99 TTFT stays within `slo_ms`, and its streams.

    A p99 over a few dozen requests is their slowest one, so one stall of the machine can
    push a single level over: the search stops only after two levels in a row miss.
    """
    best: tuple[int, Outcome] | None = None
    closest: tuple[int, Outcome] | None = None
    misses = 0
    for streams in (1, 2, 3, 4, 6, 8, 12, 16):
        out = asyncio.run(closed_loop(url, key, streams, seconds, max_tokens, logit_bias=bias))
        if closest is None or out.p(0.99) < closest[1].p(0.99):
            closest = (streams, out)
        if out.p(0.99) > slo_ms:
            misses += 1
            if misses == 2:
                break
            continue
        misses = 0
        if best is None or out.goodput(slo_ms) > best[1].goodput(slo_ms):
            best = (streams, out)
    assert closest is not None
    return best or closest


def _open_loop_capacity(
    url: str,
    key: str,
    rate: float,
    seconds: float,
    max_tokens: int,
    slo_ms: float,
    bias: dict[str, float],
) -> tuple[float, bool]:
    """The highest Poisson rate, in steps of `RATE_STEP` from `rate`, whose p99 TTFT stays
    within `slo_ms`: up while it holds, else down until it does (at most `RATE_STEPS` each
    way); that rate, and whether it held (False: none tried did, the lowest is given)."""

    def holds(at: float) -> bool:
        out = asyncio.run(open_loop(url, key, at, seconds, max_tokens, logit_bias=bias))
        return out.p(0.99) <= slo_ms

    if holds(rate):
        for _ in range(RATE_STEPS):
            if not holds(rate * RATE_STEP):
                break
            rate *= RATE_STEP
        return rate, True
    for _ in range(RATE_STEPS):
        rate /= RATE_STEP
        if holds(rate):
            return rate, True
    return rate, False


def _confirmed(
    url: str,
    key: str,
    rate: float,
    held: bool,
    seconds: float,
    max_tokens: int,
    slo_ms: float,
    bias: dict[str, float],
) -> tuple[float, Outcome, bool]:
    """The search's rate measured again with other arrival times, stepping down by
    `RATE_STEP` (at most `RATE_STEPS` times) while that measurement misses the SLO: the
    rate, its measurement and whether it held. A rate that held once by luck is not what
    the engine sustains: measured again, one run's pick gave a p99 of 10x unloaded, and the
    2x level then offered twice a rate the engine could not serve within the SLO."""

    def measured(at: float) -> Outcome:
        return asyncio.run(open_loop(url, key, at, seconds, max_tokens, seed=1, logit_bias=bias))

    out, steps = measured(rate), 0
    while held and out.p(0.99) > slo_ms and steps < RATE_STEPS:
        click.echo(
            f"note: {rate:.2f}/s held the SLO in the search but not measured again "
            f"(p99 {out.p(0.99):.0f} ms); trying {rate / RATE_STEP:.2f}/s",
            err=True,
        )
        rate /= RATE_STEP
        out, steps = measured(rate), steps + 1
    return rate, out, held and out.p(0.99) <= slo_ms


def _cap_state(url: str, operator: str, engine_url: str, before: dict | None = None) -> dict:
    """The places the API process at `url` gives the engine now (and where they came from),
    and how many requests it shed since `before` (an earlier state), by reason."""
    ops = {"Authorization": f"Bearer {operator}"}
    rows = httpx.get(f"{url}/api/v1/engines", params={"page_size": 100}, headers=ops).json()
    row = next((r for r in rows["items"] if r["url"] == engine_url and r.get("live")), None)
    admission = ((row or {}).get("live") or {}).get("admission") or {}
    shed = _shed_by_reason(metrics_text(url))
    return {
        "cap": admission.get("places"),
        "places_from": admission.get("source"),
        "shed_by_reason": shed,
        "shed_since": _since(shed, (before or {}).get("shed_by_reason", {})),
    }


def _since(now: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """What each count of `now` grew by since `before`, where it grew."""
    return {key: n - before.get(key, 0) for key, n in now.items() if n > before.get(key, 0)}


def _shed_by_reason(metrics_text: str) -> dict[str, float]:
    """The requests an API process shed for load, over all tenants, by reason: no place for
    a tenant at its share (`engine_busy`) or a wait for one that ran out (`waited_too_long`)."""
    shed: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "loraplex_admission_rejections":
            continue
        for sample in family.samples:
            reason = sample.labels.get("reason", "")
            if sample.name.endswith("_total") and reason in ("engine_busy", "waited_too_long"):
                shed[reason] = shed.get(reason, 0) + sample.value
    return shed


def _gc_paused(url: str) -> tuple[float, float]:
    """How many collections of its older generations the API process at `url` has made,
    and their seconds in all (its `loraplex_gc_pause_seconds`)."""
    names = ("loraplex_gc_pause_seconds_count", "loraplex_gc_pause_seconds_sum")
    count, seconds = samples_named(metrics_text(url), names).values()
    return count, seconds


def _api_gc(before: tuple[float, float], after: tuple[float, float]) -> dict:
    """The API process's garbage-collector pauses over a level: how many, and in all."""
    return {"api_gc_pauses": after[0] - before[0], "api_gc_ms": 1000 * (after[1] - before[1])}


def _api_cpu(out: Outcome, cpu_s: float) -> dict:
    """The API process's CPU over a level: cores busy, and milliseconds per request offered."""
    return {
        "api_cpu_cores": cpu_s / out.elapsed if out.elapsed > 0 else float("nan"),
        "api_cpu_ms_per_request": 1000 * cpu_s / max(1, out.arrived()),
    }


def _row(level: str, out: Outcome, slo_ms: float) -> dict:
    return {
        "level": level,
        "slo_ms": slo_ms,
        "goodput": out.goodput(slo_ms),
        "done": out.done(),
        "p50_ms": out.p(0.5),
        "p99_ms": out.p(0.99),
        "refused": out.refused,
        "failed": out.failed,
        "steal": out.steal,
    }


# A's requests-per-minute bucket starts full (a minute's worth): offered 5x its rate, A is
# refused only after 15 s of sending (5T/60 > 1 + T/60). Its bucket refills while B runs
# alone, so in the later turns A is admitted at about twice its quota's rate and refused
# the rest. Run long enough for B's p99 to be more than its slowest request or two: at a
# quarter of capacity, 30 s gave B ~45 requests, and its p99 alone and with A were two
# single maxima.
# Longer where B's rate gives fewer than `LEVEL_MIN_REQUESTS` in 60 s, up to 120 s: at 3.7
# requests/s of capacity B had 55 requests, and its p99 alone and with A were two maxima.
NOISY_MIN_SECONDS, NOISY_MAX_SECONDS = 60.0, 120.0
B_SHARE = 0.25  # B offers this share of capacity, well within its quota
# B alone and B beside A are measured in turns (alone, beside, alone, ...), the two of a
# turn with the same arrival times, so that a host whose speed drifts weighs on both
# alike. Measured one after the other, B alone once caught no request over 61 ms in 88 s
# while its 88 s beside A that followed had three over 70 (run T, docs/admission.md).
NOISY_TURNS = 4


def _noisy_neighbour(
    url: str,
    operator: str,
    seconds: float,
    max_tokens: int,
    capacity: float,
    slo_ms: float,
    bias: dict[str, float],
    engine_url: str,
) -> list[dict]:
    enough = min(NOISY_MAX_SECONDS, LEVEL_MIN_REQUESTS / (capacity * B_SHARE))
    turn_s = max(seconds, NOISY_MIN_SECONDS, enough) / NOISY_TURNS
    quota_rpm = max(3, int(capacity * 60 * 0.05))  # A's plan allows 5% of the engine
    a_key = tenant_key(url, operator, requests_per_minute=quota_rpm)
    b_key = tenant_key(url, operator)
    b_rate = capacity * B_SHARE

    async def b_open_loop(turn: int) -> Outcome:  # one turn's arrivals, alone or beside A
        return await open_loop(url, b_key, b_rate, turn_s, max_tokens, 1 + turn, logit_bias=bias)

    async def both(turn: int) -> tuple[Outcome, Outcome]:
        a_rate = 5 * quota_rpm / 60
        return await asyncio.gather(
            open_loop(url, a_key, a_rate, turn_s, max_tokens, 100 + turn, logit_bias=bias),
            b_open_loop(turn),
        )

    alone, noisy_a, with_a = [], [], []
    shed_alone: Counter[str] = Counter()
    for turn in range(NOISY_TURNS):
        before_alone = _cap_state(url, operator, engine_url)
        alone.append(asyncio.run(b_open_loop(turn)))
        shed_alone.update(_cap_state(url, operator, engine_url, before_alone)["shed_since"])
        a, b = asyncio.run(both(turn))
        noisy_a.append(a)
        with_a.append(b)
    b_alone, a_all, b_with_a = _merged(alone), _merged(noisy_a), _merged(with_a)
    state = _cap_state(url, operator, engine_url)
    cap = state["cap"]
    return [
        {
            **_row("noisy-neighbour", b_alone, slo_ms),
            "tenant": "B alone",
            "shed_since": dict(shed_alone),
            "requests": b_alone.timeline(),
        },
        {
            **_row("noisy-neighbour", a_all, slo_ms),
            "tenant": "A (5x quota)",
            "cap": cap,
            "places_from": state["places_from"],
            "requests": a_all.timeline(),
            "refused_requests": a_all.refusals(),
        },
        {
            **_row("noisy-neighbour", b_with_a, slo_ms),
            "tenant": "B with A",
            "p99_vs_alone": b_with_a.p(0.99) / b_alone.p(0.99),
            "cap": cap,
            "requests": b_with_a.timeline(),
        },
    ]


def _merged(parts: list[Outcome]) -> Outcome:
    """One outcome of windows measured apart: their requests together, their seconds summed.

    `elapsed` is summed too: the windows' busy time, not the wall time that spans them.
    """
    out = Outcome(sum(p.seconds for p in parts))
    refused: Counter[str] = Counter()
    for p in parts:
        out.ttfts += p.ttfts
        out.ended += p.ended
        out.started += p.started
        refused.update(p.refused)
        out.refused_at += p.refused_at
        out.failed += p.failed
        out.elapsed += p.elapsed
    out.refused = dict(refused)
    out.steal = sum(p.steal * p.seconds for p in parts) / out.seconds
    return out


def _print(rows: list[dict]) -> None:
    click.echo(
        f"{'load':>16} {'admission':>9} {'offered/s':>9} {'goodput/s':>9} {'vs cap':>6} "
        f"{'done/s':>6} {'p50 ms':>6} {'p99 TTFT ms':>11} {'vs unloaded':>11} "
        f"{'places':>6} {'api cpu':>7} {'ms/req':>6} {'steal':>5} refused"
    )
    for r in rows:
        click.echo(
            f"{r['level'] + (' ' + r['tenant'] if 'tenant' in r else ''):>16} "
            f"{r.get('admission', ''):>9} "
            f"{r.get('offered', float('nan')):9.2f} {r['goodput']:9.2f} "
            f"{r.get('goodput_vs_capacity', float('nan')):6.2f} {r['done']:6.2f} "
            f"{r['p50_ms']:6.0f} {r['p99_ms']:11.0f} "
            f"{r.get('p99_vs_unloaded', r.get('p99_vs_alone', float('nan'))):11.2f} "
            f"{r.get('cap') or '':>6} "
            f"{r.get('api_cpu_cores', float('nan')):7.2f} "
            f"{r.get('api_cpu_ms_per_request', float('nan')):6.1f} "
            f"{r['steal']:5.1%} "
            f"{r['refused'] or ''}"
        )
    for r in rows:  # a level's misses: one stall, or a tail spread through the level
        if spells := r.get("slow_spells"):
            over = sum(n for _, n in spells)
            where = ", ".join(f"{n} at {at:.1f} s" for at, n in spells[:6])
            more = ", ..." if len(spells) > 6 else ""
            click.echo(
                f"{r['level']} {r['admission']}: {over} over the SLO in {len(spells)} "
                f"spell{'s' if len(spells) > 1 else ''} ({where}{more}); the API's "
                f"garbage collector paused it {r['api_gc_pauses']:.0f} times, "
                f"{r['api_gc_ms']:.0f} ms in all"
            )
    for r in rows:  # why each "on" level shed
        if r.get("admission") == "on" and (shed := r.get("shed_since")):
            click.echo(
                f"{r['level']} on: {r.get('cap')} places ({r.get('places_from')}); shed "
                f"{shed.get('engine_busy', 0):.0f} with no place at their share, "
                f"{shed.get('waited_too_long', 0):.0f} after waiting"
            )
    for r in rows:  # why B alone was shed, where it was
        if r.get("tenant") == "B alone" and (shed := r.get("shed_since")):
            click.echo(
                f"noisy-neighbour B alone: shed {shed.get('engine_busy', 0):.0f} with no "
                f"place, {shed.get('waited_too_long', 0):.0f} after waiting"
            )


# The targets of admission under overload: at 2x capacity, goodput and the admitted p99
# TTFT against unloaded; beside a noisy neighbour, B's p99 against B alone.
GOODPUT_AT_2X_AT_LEAST, P99_AT_2X_AT_MOST, B_P99_AT_MOST = 0.9, 2.0, 1.25


def _print_targets(rows: list[dict]) -> None:
    """Each target, met or missed, with the uncapped process's p99 at 0.5x and 1x beside
    the 2x bound: where the engine misses it even below capacity with nothing refused, the
    host's noise sets the tail, not the cap."""
    level = {(r["level"], r.get("admission")): r for r in rows}
    tenant = {r["tenant"]: r for r in rows if "tenant" in r}
    on = level.get(("2.0x", "on"))
    if on is None or "B with A" not in tenant:
        return
    b_refused = sum(sum(tenant[t]["refused"].values()) for t in ("B alone", "B with A"))
    below = ", ".join(
        f"{f} {level[f, 'off']['p99_vs_unloaded']:.2f}x"
        for f in ("0.5x", "1.0x")
        if (f, "off") in level
    )
    checks = [
        (
            "2x goodput",
            on["goodput_vs_capacity"] >= GOODPUT_AT_2X_AT_LEAST,
            f"{on['goodput_vs_capacity']:.2f} of capacity (at least {GOODPUT_AT_2X_AT_LEAST})",
        ),
        (
            "2x admitted p99",
            on["p99_vs_unloaded"] <= P99_AT_2X_AT_MOST,
            f"{on['p99_vs_unloaded']:.2f}x unloaded (at most {P99_AT_2X_AT_MOST}; uncapped "
            f"at {below})",
        ),
        (
            "B's p99 beside A",
            tenant["B with A"]["p99_vs_alone"] <= B_P99_AT_MOST,
            f"{tenant['B with A']['p99_vs_alone']:.2f}x alone (at most {B_P99_AT_MOST})",
        ),
        ("B refused", b_refused == 0, f"{b_refused} requests (none allowed)"),
    ]
    for name, met, figures in checks:
        click.echo(f"target {name}: {'met' if met else 'MISSED'}, {figures}")
    uncapped = level.get(("1.0x", "off"), {}).get("p99_vs_unloaded", 0.0)
    if uncapped > P99_AT_2X_AT_MOST:  # the host's phase, not the cap, set the tail
        click.echo(
            f"note: uncapped at 1x, with nothing refused, p99 was already {uncapped:.2f}x "
            f"unloaded, over the 2x bound: the host missed it below the load the cap is "
            "judged at"
        )
