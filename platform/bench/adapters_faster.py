"""The bench's load in the simulator at the rates a GPU takes.

This host serves about one request a second; on the simulator's GPU profile that rate
leaves the engines nearly idle, so no slot is ever contended and no way can show a cliff.
So the simulator also runs the bench's load shape (same adapters, ranks, popularity, shift
and scan) at a ladder of rates a GPU takes, each with as many requests: a long trace per
rate, so a p99 is a hundred requests, not the two or three the live trace's compressed
arrivals gave (the first version of this table, whose verdicts moved with the trace).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loraplex.bench.adapters_trace import LoadShape, make_trace
from loraplex.bench.adapters_verdict import (
    FLOOR,
    LORAPLEX,
    P99_TARGET,
    PLAIN,
    SAID,
    p99_against_plain,
    predicted,
)

GPU_RATES_PER_S = (5.0, 10.0, 20.0, 40.0, 80.0)  # offered to the simulator's two GPUs
REQUESTS_PER_RATE = 10_000
WAYS = (FLOOR, LORAPLEX, PLAIN)


def at_gpu_rates(
    shape: LoadShape, gpu_slots: int, host_slots: int, rates: tuple[float, ...] = GPU_RATES_PER_S
) -> list[dict[str, Any]]:
    """Per rate: each way's TTFT p50 / p99 (ms) on the shape's load, by way."""
    rows = []
    for rate in rates:
        workload, _ = make_trace(replace(shape, rate_per_s=rate, seconds=REQUESTS_PER_RATE / rate))
        sim = predicted(workload, gpu_slots, host_slots, oracle=False)
        rows.append({
            "rate_rps": rate,
            "requests": len(workload),
            **{
                way: (1000 * sim[way]["ttft_p50_s"], 1000 * sim[way]["ttft_p99_s"])
                for way in WAYS
            },
        })  # fmt: skip
    return rows


def faster_table(rows: list[dict[str, Any]]) -> str:
    """One line per rate: each way's p50 / p99 and the p99 target's verdict there."""
    lines = [
        f"simulator, this load at a GPU's rates ({REQUESTS_PER_RATE:,} requests each, GPU cost "
        "profile), TTFT p50 / p99 ms:",
        f"{'rate/s':>7} "
        + " ".join(f"{way[:22]:>22}" for way in WAYS)
        + "  p50 plain/Loraplex  p99 target",
    ]
    for row in rows:
        floor, ours, plain = (row[way][1] for way in WAYS)
        verdict = SAID[p99_against_plain(floor, plain, ours)[0]]
        cells = " ".join(f"{f'{row[w][0]:.0f} / {row[w][1]:.0f}':>22}" for w in WAYS)
        over = (
            f"plain {plain / floor:.1f}x, Loraplex {ours / floor:.1f}x the floor's p99"
            if floor > 0
            else "no floor to read against"
        )
        p50s = row[PLAIN][0] / row[LORAPLEX][0] if row[LORAPLEX][0] > 0 else float("nan")
        lines.append(f"{row['rate_rps']:>7.1f} {cells}  {p50s:>18.1f}x  {verdict} ({over})")
    lines.append(f"(the p99 target, {P99_TARGET}, judged as live: against the floor's p99)")
    return "\n".join(lines)
