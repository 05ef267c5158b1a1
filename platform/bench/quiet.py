"""`loraplex bench quiet`: how much slower is a request that finds the engine after a quiet spell?

One request at a time, straight to the engine (no gateway), each after a chosen spell of
quiet; the baseline is the same requests back to back, measured in the same run. The rounds
go over every spell in turn, so a slow phase of the host touches them all alike. Why it
matters: the adaptive cap takes an idle request's TTFT as its reference, and on a host whose
caches and CPUs cool down within a fraction of a second, a request after a quiet spell is
no reference for requests under load (docs/admission.md, "A warm reference, alone through
its prefill").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from pathlib import Path

import click

from loraplex.serving.engines import EngineDriver, GenerateRequest, make_driver

PROMPT = [{"role": "user", "content": "Tell me a story about a cat."}]


async def _first_token_ms(driver: EngineDriver) -> float:
    request = GenerateRequest(
        rid=uuid.uuid4().hex, messages=PROMPT, max_tokens=2, temperature=0.0, stream=True
    )
    started = time.perf_counter()
    async with contextlib.aclosing(driver.generate(request)) as chunks:
        async for chunk in chunks:
            if chunk.text:
                break
    return 1000 * (time.perf_counter() - started)


async def _measure(kind: str, url: str, quiet_s: list[float], rounds: int, per_round: int):
    driver = make_driver(kind, url)
    ttfts: dict[float, list[float]] = {quiet: [] for quiet in quiet_s}
    try:
        await _first_token_ms(driver)  # the connection and the engine's first request
        for _ in range(rounds):
            for quiet in quiet_s:
                for _ in range(per_round):
                    await asyncio.sleep(quiet)
                    ttfts[quiet].append(await _first_token_ms(driver))
    finally:
        await driver.aclose()
    return ttfts


@click.command("quiet")
@click.option("--url", default="http://127.0.0.1:8100", show_default=True, help="The engine.")
@click.option("--kind", default="sglang", show_default=True, help="sglang or vllm.")
@click.option(
    "--quiet", "quiet_list", default="0,0.05,0.1,0.2,0.3,1", show_default=True,
    help="Seconds of quiet before each request, comma-separated; 0 is the baseline.",
)  # fmt: skip
@click.option("--rounds", default=4, show_default=True, help="Passes over every spell.")
@click.option("--per-round", default=5, show_default=True, help="Requests per spell per pass.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("var/bench/quiet.json"))
def bench_quiet(
    url: str, kind: str, quiet_list: str, rounds: int, per_round: int, out: Path
) -> None:
    """TTFT of one request at a time after each spell of quiet, against back to back."""
    quiet_s = sorted({0.0, *(float(q) for q in quiet_list.split(",") if q.strip())})
    ttfts = asyncio.run(_measure(kind, url, quiet_s, rounds, per_round))
    base = statistics.median(ttfts[0.0])
    click.echo(f"{'quiet before':>12} {'requests':>8} {'p50 ms':>7} {'p90 ms':>7} {'vs 0':>5}")
    rows = []
    for quiet, values in ttfts.items():
        p50 = statistics.median(values)
        p90 = statistics.quantiles(values, n=10, method="inclusive")[-1]
        rows.append({"quiet_s": quiet, "requests": len(values), "p50_ms": p50, "p90_ms": p90})
        click.echo(f"{quiet:>11g}s {len(values):>8} {p50:>7.1f} {p90:>7.1f} {p50 / base:>5.2f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"url": url, "kind": kind, "rows": rows}, indent=2))
    click.echo(f"wrote {out}")
