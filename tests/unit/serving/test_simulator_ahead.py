"""The simulator runs the loads ahead of need through the same core, and they pay off."""

from __future__ import annotations

from typing import Any

from loraplex.serving.simulator.scenarios import (
    AT_ADMISSION,
    NO_WARM,
    ON_ARRIVAL,
    WARM,
    ClusterShape,
    gated,
    uploads,
)
from loraplex.serving.simulator.workload import WorkloadSpec


def _by_policy(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["policy"]: row for row in rows}


def _spec(rate: float) -> WorkloadSpec:
    return WorkloadSpec(requests=4_000, adapters=300, tenants=10, rate_per_s=rate, seed=0)


def test_fetching_on_arrival_shortens_first_tokens_behind_a_full_gate() -> None:
    rows = _by_policy(gated(_spec(16.0), ClusterShape(engines=4)))
    before, after = rows[AT_ADMISSION], rows[ON_ARRIVAL]
    assert after["first_ttft_p50_s"] < before["first_ttft_p50_s"]
    assert after["ttft_p99_s"] < before["ttft_p99_s"]
    assert after["hit_ratio"]["cold"] < before["hit_ratio"]["cold"]
    assert after["cold_loads"] <= before["cold_loads"] * 1.05  # no fetch wasted to speak of


def test_warming_at_upload_spares_first_requests_the_download() -> None:
    rows = _by_policy(uploads(_spec(12.0), ClusterShape(engines=4)))
    before, after = rows[NO_WARM], rows[WARM]
    assert after["hit_ratio"]["cold"] < before["hit_ratio"]["cold"] / 2
    assert after["first_ttft_p50_s"] < before["first_ttft_p50_s"]
    assert after["deferred"] == before["deferred"] == 0  # warming charges nobody's budget
