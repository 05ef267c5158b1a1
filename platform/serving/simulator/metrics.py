"""What a simulation run measures, and the summary row it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loraplex.serving.policy import Tier
from loraplex.serving.simulator.costs import TTFT_SLO_S
from loraplex.serving.simulator.workload import SCAN_TENANT

GB = 1e9


@dataclass(slots=True)
class RunMetrics:
    """Counters and per-request observations filled in by the event loop."""

    requests: int
    ttft: np.ndarray = field(init=False)
    found: np.ndarray = field(init=False)
    loads: dict[Tier, int] = field(default_factory=lambda: dict.fromkeys(Tier, 0))
    cold_loads_by_tenant: dict[str, int] = field(default_factory=dict)
    evictions: int = 0
    gpu_swaps: int = 0
    deferred: int = 0
    rejected: int = 0
    resident_samples: list[int] = field(default_factory=list)
    end_time: float = 0.0

    def __post_init__(self) -> None:
        self.ttft = np.full(self.requests, np.nan)
        self.found = np.zeros(self.requests, dtype=np.int8)


def _p(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(
    name: str,
    metrics: RunMetrics,
    tenants: np.ndarray,
    slot_bytes_total: int,
    wall_s: float,
) -> dict[str, Any]:
    """One table row (and JSON record) for one policy's run."""
    ttft = metrics.ttft
    done = ~np.isnan(ttft)
    served = metrics.found[done]
    hit = {
        tier.name.lower(): float(np.mean(served == tier)) if len(served) else 0.0 for tier in Tier
    }
    per_tenant = {str(t): _p(ttft[(tenants == t) & done], 99) for t in np.unique(tenants)}
    not_scanner = tenants != SCAN_TENANT
    others = not_scanner & done
    resident = float(np.mean(metrics.resident_samples)) if metrics.resident_samples else 0.0
    return {
        "policy": name,
        "requests": int(metrics.requests),
        "cold_loads": metrics.loads[Tier.DISK],
        "host_loads": metrics.loads[Tier.LOADED],
        "gpu_swaps": metrics.gpu_swaps,
        "evictions": metrics.evictions,
        "deferred": metrics.deferred,
        "rejected": metrics.rejected,
        "hit_ratio": hit,
        "ttft_p50_s": _p(ttft[done], 50),
        "ttft_p99_s": _p(ttft[done], 99),
        "others_ttft_p99_s": _p(ttft[others], 99),
        "others_requests": int(np.sum(not_scanner)),
        # Over the service level or never served (refused): NaN fails the comparison.
        "others_slo_misses": int(np.sum(not_scanner & ~(ttft <= TTFT_SLO_S))),
        "others_cold_loads": metrics.loads[Tier.DISK]
        - metrics.cold_loads_by_tenant.get(SCAN_TENANT, 0),
        "goodput_rps": float(np.sum(ttft[done] <= TTFT_SLO_S)) / max(metrics.end_time, 1e-9),
        "tenant_ttft_p99_s": per_tenant,
        "tenant_cold_loads": dict(sorted(metrics.cold_loads_by_tenant.items())),
        "max_tenant_p99_s": max(per_tenant.values()) if per_tenant else float("nan"),
        "resident_adapters": resident,
        "resident_per_slot_gb": resident / (slot_bytes_total / GB) if slot_bytes_total else 0.0,
        "sim_time_s": metrics.end_time,
        "wall_s": wall_s,
    }
