"""The simulator: the default policy against LRU, the report, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from loraplex.serving.simulator.cli import simulate
from loraplex.serving.simulator.scenarios import ClusterShape, scan
from loraplex.serving.simulator.workload import WorkloadSpec


def test_default_policy_needs_fewer_cold_loads_than_lru_under_a_scan() -> None:
    spec = WorkloadSpec(
        requests=6_000, adapters=400, rate_per_s=12.0, scan_adapters=120, scan_share=0.2
    )
    rows = {
        row["policy"]: row
        for row in scan(spec, ClusterShape(host_slots=16, disk_budget_bytes=8 * 10**9))
    }
    lru, default, belady = rows["lru"], rows["default (gdsf+budget)"], rows["belady (bound)"]
    assert default["cold_loads"] < 0.85 * lru["cold_loads"]
    assert belady["cold_loads"] <= default["cold_loads"]


def test_simulate_prints_a_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    result = CliRunner().invoke(
        simulate,
        ["--scenario", "stationary", "--requests", "2000", "--adapters", "200", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "belady (bound)" in result.output
    rows = json.loads(out.read_text())["runs"][0]["rows"]
    assert {row["policy"] for row in rows} >= {"lru", "belady (bound)"}


def test_simulate_prints_a_verdict_per_target() -> None:
    result = CliRunner().invoke(
        simulate, ["--scenario", "stationary", "--requests", "2000", "--adapters", "200"]
    )
    assert result.exit_code == 0, result.output
    verdicts = [line for line in result.output.splitlines() if line[:4] in ("PASS", "FAIL")]
    assert len(verdicts) == 2  # fewer cold loads, lower p99
