"""The gateway's CPU per request and per token, this checkout against an earlier commit, in
one run: `python -m tests.support.gateway_cost --baseline <rev>`.

Both API processes relay the same load from the stand-in engine (`tests/system/fake_engine.py`,
one chunk per token per stream), round by round, interleaved, so the host's mood falls on
both alike; each round's CPU is the scheduler's count for every thread of the process
(`bench/proc_cpu.py`), and a stream counts only if it ended without an error event.
The baseline runs the other commit's `platform/` (a `git worktree`) in the same virtual
environment; `--baseline-without-hiredis` keeps redis-py's pure-Python parser for it, as a
commit from before hiredis was a dependency had it. `--profile NAME` writes that process's
cProfile (CPU time, measured rounds only) to `var/bench/gateway-cost-NAME.prof`.

Needs PostgreSQL and Redis (`LORAPLEX_DATABASE_URL`, `LORAPLEX_REDIS_URL`), as `make test`
starts them. `loraplex bench gateway` measures the same against a real engine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from loraplex.bench.api import operator_key
from loraplex.bench.proc_cpu import cpu_seconds
from loraplex.bench.server import api_process, free_port, without_shedding
from loraplex.bench.tenants import register_engine
from loraplex.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
FAKE_ENGINE = ROOT / "tests" / "system" / "fake_engine.py"
# Loaded by every process started with its folder first on PYTHONPATH: hides hiredis where
# asked, and profiles between SIGUSR1 and SIGUSR2 where asked.
SITECUSTOMIZE = """\
import os, sys
if os.environ.get("GATEWAY_COST_NO_HIREDIS"):
    sys.modules["hiredis"] = None
if os.environ.get("GATEWAY_COST_PROFILE"):
    import cProfile, signal, time
    _profile = cProfile.Profile(time.process_time)
    def _stop(*_):
        _profile.disable()
        _profile.dump_stats(os.environ["GATEWAY_COST_PROFILE"])
    signal.signal(signal.SIGUSR1, lambda *_: _profile.enable())
    signal.signal(signal.SIGUSR2, _stop)
"""
BASE_MODEL = {
    "source": "bench/none",  # no tokenizer here: prompt counting is left to the engine
    "architecture": "LlamaForCausalLM",
    "hidden_size": 64,
    "num_layers": 2,
    "vocab_size": 256,
    "max_context": 4096,
    "modules": {"q_proj": [64, 64], "v_proj": [64, 64]},
}


async def _requests(
    url: str, key: str, model: str, streams: int, count: int, tokens: int, stream: bool
) -> None:
    body = {
        "model": model,
        "max_tokens": tokens,
        "stream": stream,
        "messages": [{"role": "user", "content": f"tokens={tokens} every=0.02"}],
    }
    headers = {"Authorization": f"Bearer {key}"}
    open_at_once = asyncio.Semaphore(streams)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            async with (
                open_at_once,
                session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as reply,
            ):
                text = await reply.read()
                # A stream that failed still answers 200, with an error event: cheap, and
                # counted as if it had relayed every token, it would flatter the process.
                if reply.status != 200 or b'"error"' in text:
                    raise RuntimeError(f"{reply.status}: {text[:300]!r}")

        await asyncio.gather(*[one() for _ in range(count)])


@contextlib.contextmanager
def _baseline_tree(rev: str) -> Iterator[Path]:
    """A folder whose `loraplex` is `rev`'s `platform/` (for PYTHONPATH)."""
    with tempfile.TemporaryDirectory(prefix="gateway-cost-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
            check=True,
        )
        try:
            (Path(tmp) / "path").mkdir()
            (Path(tmp) / "path" / "loraplex").symlink_to(tree / "platform")
            yield Path(tmp) / "path"
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
            )


def _register(url: str, operator: str, model: str, engine_url: str) -> str:
    """The stand-in engine as `model`'s engine; a tenant key for it."""
    engine = {
        "name": f"cost-{secrets.token_hex(3)}",
        "url": engine_url,
        "kind": "vllm",
        "base_model": model,
        "max_lora_rank": 16,
        "gpu_slots": 4,
        "host_slots": 8,
    }
    return register_engine(url, operator, {**BASE_MODEL, "name": model}, engine)


def _until_serving(url: str, key: str, model: str, stream: bool) -> None:
    for _ in range(120):  # the health poller's first round puts the engine in rotation
        try:
            asyncio.run(_requests(url, key, model, 1, 1, 2, stream))
            return
        except RuntimeError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} never served the stand-in engine")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare against")
    parser.add_argument("--baseline-without-hiredis", action="store_true")
    parser.add_argument("--streams", default="16,64")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--not-streamed", action="store_true")
    parser.add_argument("--profile", choices=["baseline", "this"])
    args = parser.parse_args()
    stream = not args.not_streamed
    settings = without_shedding(Settings.from_env())
    model = f"cost-{secrets.token_hex(3)}"
    port = free_port()
    engine = subprocess.Popen(
        [sys.executable, str(FAKE_ENGINE), "--host", "127.0.0.1", "--port", str(port),
         "--name", "cost", "--model", model],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    operator = operator_key(settings)
    profiles = ROOT / "var" / "bench"
    profiles.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as site:
            Path(site, "sitecustomize.py").write_text(SITECUSTOMIZE)
            baseline = stack.enter_context(_baseline_tree(args.baseline))
            envs = {
                "baseline": {"PYTHONPATH": f"{site}:{baseline}"},
                "this": {"PYTHONPATH": site},
            }
            if args.baseline_without_hiredis:
                envs["baseline"]["GATEWAY_COST_NO_HIREDIS"] = "1"
            if args.profile:
                target = str(profiles / f"gateway-cost-{args.profile}.prof")
                envs[args.profile]["GATEWAY_COST_PROFILE"] = target
            apis = {
                name: stack.enter_context(api_process({**settings.to_env(), **env}))
                for name, env in envs.items()
            }
            key = _register(apis["this"][0], operator, model, f"http://127.0.0.1:{port}")
            for url, _ in apis.values():
                _until_serving(url, key, model, stream)
            per_request: dict[tuple[int, str], list[float]] = {}
            for streams in [int(s) for s in args.streams.split(",")]:
                count = max(8, streams * 3)
                for url, _ in apis.values():  # warm-up: not measured
                    asyncio.run(_requests(url, key, model, streams, streams, args.tokens, stream))
                if args.profile:
                    os.kill(apis[args.profile][1], signal.SIGUSR1)
                for _ in range(args.rounds):
                    for name, (url, pid) in apis.items():
                        before = cpu_seconds(pid) or 0.0
                        asyncio.run(_requests(url, key, model, streams, count, args.tokens, stream))
                        spent = (cpu_seconds(pid) or 0.0) - before
                        per_request.setdefault((streams, name), []).append(spent / count)
                if args.profile:
                    os.kill(apis[args.profile][1], signal.SIGUSR2)
                    time.sleep(2)
                    args.profile = None  # one level's profile
            _print(per_request, args, stream)
    finally:
        engine.terminate()
        engine.wait(10)


def _print(per_request: dict[tuple[int, str], list[float]], args: argparse.Namespace,
           stream: bool) -> None:  # fmt: skip
    kind = "streamed" if stream else "not streamed"
    print(f"\n{kind}, {args.tokens}-token answers, {args.rounds} rounds, medians; "
          f"baseline {args.baseline}\n")  # fmt: skip
    print("| streams | API process | CPU per request | CPU per token | each round (µs/token) |")
    print("|---|---|---|---|---|")
    for (streams, name), values in sorted(per_request.items()):
        median = statistics.median(values)
        rounds = ", ".join(f"{v / args.tokens * 1e6:.0f}" for v in values)
        print(f"| {streams} | {name} | {median * 1e3:.2f} ms | "
              f"{median / args.tokens * 1e6:.1f} µs | {rounds} |")  # fmt: skip


if __name__ == "__main__":
    main()
