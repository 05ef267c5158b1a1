"""The bench's trace in the simulator at the rates a GPU takes.

This host serves about one request a second; on the simulator's GPU profile that rate
leaves the engines nearly idle, so no slot is ever contended and no way can show a cliff.
The same requests with their arrivals k times closer are the same workload offered to a
machine k times faster: where the simulator says the plain way's cliff begins, and
whether Loraplex stays under it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loraplex.bench.adapters_verdict import (
    FLOOR,
    LORAPLEX,
    P99_TARGET,
    PLAIN,
    SAID,
    p99_against_plain,
    predicted,
)
from loraplex.serving.simulator.workload import Workload

SPEEDUPS = (8, 32, 128)  # arrivals this many times closer than the live trace's
WAYS = (FLOOR, LORAPLEX, PLAIN)


def at_gpu_rates(workload: Workload, gpu_slots: int, host_slots: int) -> list[dict[str, Any]]:
    """Per speed-up: the offered rate and each way's TTFT p50 / p99 (ms), by way."""
    if len(workload) < 2:
        return []
    span = float(workload.arrival[-1] - workload.arrival[0]) or 1.0
    rows = []
    for k in SPEEDUPS:
        faster = replace(workload, arrival=workload.arrival / k)
        sim = predicted(faster, gpu_slots, host_slots, oracle=False)
        rows.append({
            "speedup": k,
            "rate_rps": k * len(workload) / span,
            **{
                way: (1000 * sim[way]["ttft_p50_s"], 1000 * sim[way]["ttft_p99_s"])
                for way in WAYS
            },
        })  # fmt: skip
    return rows


def faster_table(rows: list[dict[str, Any]]) -> str:
    """One line per speed-up: each way's p50 / p99 and the p99 target's verdict there."""
    lines = [
        "simulator, the same requests k times closer (GPU cost profile), TTFT p50 / p99 ms:",
        f"{'k':>4} {'rate/s':>7} " + " ".join(f"{way[:22]:>22}" for way in WAYS) + "  p99 target",
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
        lines.append(f"{row['speedup']:>4} {row['rate_rps']:>7.1f} {cells}  {verdict} ({over})")
    lines.append(f"(the p99 target, {P99_TARGET}, judged as live: against the floor's p99)")
    return "\n".join(lines)
