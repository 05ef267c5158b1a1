"""The simulator: the default policy against LRU, the report, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from loraplex.serving.simulator.cli import simulate
from loraplex.serving.simulator.scenarios import (
    BELADY_NAME,
    DEFAULT_NAME,
    LRU_NAME,
    ClusterShape,
    scan,
)
from loraplex.serving.simulator.seeds import bound_gaps, parse_seeds, pass_counts
from loraplex.serving.simulator.workload import WorkloadSpec, generate


def test_default_policy_needs_fewer_cold_loads_than_lru_under_a_scan() -> None:
    spec = WorkloadSpec(
        requests=6_000, adapters=400, rate_per_s=12.0, scan_adapters=120, scan_share=0.2
    )
    rows = {
        row["policy"]: row
        for row in scan(spec, ClusterShape(host_slots=16, disk_budget_bytes=8 * 10**9))
    }
    lru, default, belady = rows[LRU_NAME], rows[DEFAULT_NAME], rows[BELADY_NAME]
    assert default["cold_loads"] < 0.85 * lru["cold_loads"]
    assert belady["cold_loads"] <= default["cold_loads"]


def test_simulate_prints_a_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    result = CliRunner().invoke(
        simulate,
        ["--scenario", "stationary", "--requests", "2000", "--adapters", "200", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "belady (oracle)" in result.output and "cold_load_bound" in result.output
    rows = json.loads(out.read_text())["runs"][0]["rows"]
    assert {row["policy"] for row in rows} >= {"lru", "belady (oracle)"}
    assert all(row["cold_loads"] >= row["cold_load_bound"] > 0 for row in rows)


def test_simulate_prints_a_verdict_per_target() -> None:
    result = CliRunner().invoke(
        simulate, ["--scenario", "stationary", "--requests", "2000", "--adapters", "200"]
    )
    assert result.exit_code == 0, result.output
    verdicts = [line for line in result.output.splitlines() if line[:4] in ("PASS", "FAIL")]
    assert len(verdicts) == 3  # fewer cold loads, lower p99, distance from belady


def test_a_rotating_shift_moves_the_hot_adapter_to_the_tail() -> None:
    spec = WorkloadSpec(requests=20_000, adapters=100, shift_every_s=100.0, shift_rotate=10)
    w = generate(spec)
    first = np.bincount(w.adapter[w.arrival < 100.0], minlength=100)
    second = np.bincount(w.adapter[(w.arrival >= 100.0) & (w.arrival < 200.0)], minlength=100)
    hot = int(np.argmax(first))
    assert second[hot] < first[hot] / 20  # rank 1 became rank 91


def test_parse_seeds_reads_ranges_and_lists() -> None:
    assert parse_seeds("0-3,7,2") == [0, 1, 2, 3, 7]
    with pytest.raises(ValueError, match="range"):
        parse_seeds("5-2")


def _record(seed: int, default: int, passed: bool) -> dict[str, object]:
    rows = [
        {"policy": "lru", "cold_loads": 300, "x_bound": 3.0},
        {"policy": DEFAULT_NAME, "cold_loads": default, "x_bound": default / 100},
        {"policy": BELADY_NAME, "cold_loads": 100, "x_bound": 1.0},
    ]
    target = {"target": "t", "passed": passed, "measured": ""}
    return {"scenario": "stationary", "seed": seed, "rows": rows, "targets": [target]}


def test_pass_counts_count_the_seeds_that_passed_each_target() -> None:
    records = [_record(0, 100, True), _record(1, 100, False), _record(2, 100, True)]
    [count] = pass_counts(records)
    assert (count.passed, count.seeds) == (2, 3)


def test_bound_gaps_report_mean_and_worst_over_seeds() -> None:
    gaps = {g.policy: g for g in bound_gaps([_record(0, 110, True), _record(1, 130, True)])}
    assert gaps[DEFAULT_NAME].mean == pytest.approx(1.2)
    assert gaps[DEFAULT_NAME].worst == pytest.approx(1.3)


def test_simulate_with_seeds_prints_the_gap_and_pass_tables() -> None:
    args = ["--scenario", "stationary", "--seeds", "0-1", "--requests", "1500", "--adapters", "150"]
    result = CliRunner().invoke(simulate, args)
    assert result.exit_code == 0, result.output
    assert "mean x bound" in result.output
    assert "seeds passing" in result.output
