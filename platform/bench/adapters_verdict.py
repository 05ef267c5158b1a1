"""The bench's clusters as the simulator sees them, its prediction for the bench's trace, and
the issue's targets checked against one table's ways."""

from __future__ import annotations

import math
from typing import Any

from loraplex.bench.adapters_report import MIN_ADAPTER_REQUESTS, WayStats
from loraplex.serving.policy import NodeSpec
from loraplex.serving.simulator import costs
from loraplex.serving.simulator.loop import simulate
from loraplex.serving.simulator.scenarios import DEFAULT, DEFAULT_NAME, LRU, LRU_NAME
from loraplex.serving.simulator.workload import Workload

DISK_BYTES = 20 * 10**9  # a node's adapter cache: the whole trace fits on every disk

FLOOR, PLAIN, LORAPLEX = "all resident (floor)", "plain (SGLang LRU, RR)", "Loraplex"
P50_OVER_FLOOR = 1.5  # Loraplex TTFT p50 at most this x the floor's
P99_UNDER_PLAIN = 3.0  # the plain way's TTFT p99 at least this x Loraplex's
WORST_OVER_MEDIAN = 5.0  # no adapter's p99 above this x the median adapter's


def loraplex_nodes(gpu_slots: int, host_slots: int) -> list[NodeSpec]:
    """The Loraplex way's engines: rank classes 16 and 64."""
    return [
        NodeSpec(f"r{rank}", rank, gpu_slots, host_slots, DISK_BYTES, costs.MAX_RUNNING)
        for rank in (16, 64)
    ]


def plain_nodes(gpu_slots: int, adapters: int) -> list[NodeSpec]:
    """The plain way's engines: both at rank 64, every adapter in host memory."""
    return [
        NodeSpec(f"plain-{x}", 64, gpu_slots, adapters, DISK_BYTES, costs.MAX_RUNNING) for x in "ab"
    ]


def predicted(workload: Workload, gpu_slots: int, host_slots: int) -> list[dict[str, Any]]:
    """The simulator on the same trace: the default policy on the Loraplex way's engines, and
    SGLang's LRU on the plain way's (its cost profile is a GPU's, not this machine's)."""
    adapters = len(workload.adapters)
    return [
        simulate(DEFAULT_NAME, workload, loraplex_nodes(gpu_slots, host_slots), DEFAULT),
        simulate(f"{LRU_NAME} (plain)", workload, plain_nodes(gpu_slots, adapters), LRU),
    ]


def targets(ways: list[WayStats]) -> list[str]:
    """PASS/FAIL lines for the issue's targets on one table."""
    by = {w.way: w for w in ways}
    floor, plain, ours = by[FLOOR], by[PLAIN], by[LORAPLEX]
    checks: list[tuple[str, bool | None, str]] = [
        (
            f"Loraplex TTFT p50 <= {P50_OVER_FLOOR}x the floor's",
            ours.ttft_p50_ms <= P50_OVER_FLOOR * floor.ttft_p50_ms,
            f"{ours.ttft_p50_ms:.0f} vs {floor.ttft_p50_ms:.0f} ms",
        ),
        (
            f"plain TTFT p99 >= {P99_UNDER_PLAIN}x Loraplex's",
            plain.ttft_p99_ms >= P99_UNDER_PLAIN * ours.ttft_p99_ms,
            f"{plain.ttft_p99_ms:.0f} vs {ours.ttft_p99_ms:.0f} ms",
        ),
        (
            f"Loraplex: no adapter's p99 above {WORST_OVER_MEDIAN}x the median adapter's",
            None  # a run too short to judge it is not a pass
            if math.isnan(ours.median_adapter_p99_ms)
            else ours.worst_adapter_p99_ms <= WORST_OVER_MEDIAN * ours.median_adapter_p99_ms,
            f"worst {ours.worst_adapter_p99_ms:.0f} vs median {ours.median_adapter_p99_ms:.0f} ms"
            + (
                f" (no adapter had {MIN_ADAPTER_REQUESTS} requests: run longer, --seconds)"
                if math.isnan(ours.median_adapter_p99_ms)
                else ""
            ),
        ),
        (
            "every sampled answer equals PEFT's",
            all(w.answers_equal == w.answers_checked for w in ways),
            ", ".join(f"{w.way} {w.answers_equal}/{w.answers_checked}" for w in ways),
        ),
    ]
    said = {True: "PASS", False: "FAIL", None: "UNMEASURED"}
    return [f"{said[ok]} {what}: {detail}" for what, ok, detail in checks]
