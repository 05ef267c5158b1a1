"""The scan targets: what the scanner costs the other tenants, with the old measures reported."""

from __future__ import annotations

from typing import Any

import numpy as np
from click.testing import CliRunner

from loraplex.serving.policy import Tier
from loraplex.serving.simulator.cli import simulate
from loraplex.serving.simulator.metrics import RunMetrics, summarize
from loraplex.serving.simulator.scenarios import DEFAULT_NAME, LRU_NAME
from loraplex.serving.simulator.targets import Verdict, check


def _row(
    name: str, scanner: int, others: int, quiet: int, misses: int = 100, p99: float = 0.6
) -> dict[str, Any]:
    """A scan row: cold loads by the scanner and the others, and the others' quiet run."""
    return {
        "policy": name,
        "cold_loads": scanner + others,
        "tenant_cold_loads": {"scanner": scanner, "t0": others},
        "others_cold_loads": others,
        "others_cold_loads_without_scanner": quiet,
        "others_requests": 24_000,
        "others_slo_misses": misses,
        "others_slo_misses_without_scanner": 100,
        "others_ttft_p99_s": p99,
        "others_p99_without_scanner_s": 0.6,
        "others_p99_ratio": p99 / 0.6,
    }


def _verdicts(default: dict[str, Any]) -> list[Verdict]:
    lru = _row(LRU_NAME, scanner=1_500, others=2_500, quiet=1_000, misses=300, p99=0.62)
    return check("scan", [lru, default])


def test_a_scanner_paced_at_its_budget_fails_only_the_old_total_cut() -> None:
    # Its ~2,500 budget-paced loads put the total at 80% of lru's; the others lost nothing.
    verdicts = _verdicts(_row(DEFAULT_NAME, scanner=2_500, others=700, quiet=700))
    gating = [v for v in verdicts if v.gating]
    assert len(gating) == 2 and all(v.passed for v in gating)
    old = next(v for v in verdicts if not v.gating and "fewer" in v.target)
    assert not old.passed
    assert "scanner 2,500 vs 1,500, others 700 vs 2,500" in old.measured
    assert old.line().startswith("INFO") and old.line().endswith("(not met)")


def test_a_scanner_that_costs_the_others_cold_loads_fails() -> None:
    verdicts = _verdicts(_row(DEFAULT_NAME, scanner=300, others=1_100, quiet=700))
    cold = next(v for v in verdicts if v.gating and "cold loads" in v.target)
    assert not cold.passed
    assert cold.line().startswith("FAIL")


def test_the_others_slo_misses_count_against_the_quiet_run() -> None:
    verdicts = _verdicts(_row(DEFAULT_NAME, scanner=2_500, others=700, quiet=700, misses=130))
    slo = next(v for v in verdicts if v.gating and "SLO" in v.target)
    assert not slo.passed  # 1.30x the quiet run's 100
    assert "130 vs 100 of 24,000 (1.30x; lru 3.00x)" in slo.measured


def test_summarize_counts_the_others_slow_and_refused_requests_as_slo_misses() -> None:
    metrics = RunMetrics(4)
    metrics.ttft[:] = [0.2, 3.0, np.nan, 5.0]  # fast, slow, refused, and the scanner's slow one
    metrics.loads[Tier.DISK] = 5
    metrics.cold_loads_by_tenant = {"t0": 2, "scanner": 3}
    tenants = np.array(["t0", "t0", "t1", "scanner"])
    row = summarize("p", metrics, tenants, 1, 0.0)
    assert row["others_slo_misses"] == 2
    assert row["others_requests"] == 3
    assert row["others_cold_loads"] == 2


def test_old_scan_targets_are_reported_but_not_counted() -> None:
    args = ["--scenario", "scan", "--seeds", "0", "--requests", "3000", "--adapters", "500"]
    result = CliRunner().invoke(simulate, args)
    assert result.exit_code == 0, result.output
    assert "seed 0: " in result.output and "/2 targets PASS" in result.output
    assert "old: default has >= 30% fewer cold loads than lru" in result.output
