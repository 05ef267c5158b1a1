"""`loraplex simulate --scenario overload`, small and at two seeds: fast enough for `make test`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from loraplex.serving.simulator.cli import simulate
from loraplex.serving.simulator.engine_profile import load_profile
from loraplex.serving.simulator.overload import drive
from loraplex.serving.simulator.overload.baselines import NoAdmission
from loraplex.serving.simulator.overload.capacity import (
    SLO_MULTIPLE,
    search_yardstick,
    unloaded_ttft_s,
    yardstick,
)
from loraplex.serving.simulator.overload.pool import (
    POOL_POLICIES,
    pool_yardstick,
    run_pool_seed,
)
from loraplex.serving.simulator.overload.scenario import POLICIES, jain, run_seed, summary
from loraplex.serving.simulator.overload.workload import TenantLoad, Trace

REQUESTS_AT_1X = (
    300  # as `loraplex simulate --scenario overload` (the targets are met at this length)
)


@pytest.mark.parametrize("profile_name", ["sglang-cpu", "vllm-cpu"])
def test_overload_at_two_seeds_orders_the_policies_as_expected(profile_name: str) -> None:
    profile = load_profile(profile_name)
    yard = yardstick(profile)
    assert yard.slo_s == SLO_MULTIPLE * yard.unloaded_ttft_s
    for seed in (0, 1):
        rows = {p: summary(r) for p, r in run_seed(profile, yard, seed, REQUESTS_AT_1X).items()}
        assert set(rows) == set(POLICIES)
        # without admission 4x load collapses; every admission policy keeps goodput
        assert rows["none"]["4x p99/SLO"] > 2.0
        for policy in ("fixed cap", "today", "core", "core, no model", "oracle"):
            assert rows[policy]["4x goodput"] > rows["none"]["4x goodput"], policy
        # the core's targets (issue #45), as the full run at seeds 0-9 meets them
        core = rows["core"]
        assert core["2x goodput"] >= 0.95 and core["4x goodput"] >= 0.95
        assert core["2x p99/SLO"] <= 1.0 and core["4x p99/SLO"] <= 1.0
        assert core["B refused"] == 0 and core["Jain 2x"] >= 0.95


@pytest.mark.parametrize("profile_name", ["sglang-cpu", "vllm-cpu"])
def test_a_pool_of_two_engines_meets_the_targets_with_the_core_per_engine(
    profile_name: str,
) -> None:
    profile = load_profile(profile_name)
    pool, one = pool_yardstick(profile), yardstick(profile)
    assert pool.slo_s == one.slo_s and pool.capacity_per_s > 2 * one.capacity_per_s * 0.9
    for seed in (0, 1):
        results = run_pool_seed(profile, pool, seed, REQUESTS_AT_1X)
        rows = {p: summary(r) for p, r in results.items()}
        assert set(rows) == set(POOL_POLICIES)
        per_engine, summed = rows["core per engine"], rows["core, no model"]
        # the targets, as the full run at seeds 0-9 meets them
        assert per_engine["2x goodput"] >= 0.95 and per_engine["4x goodput"] >= 0.95
        assert per_engine["2x p99/SLO"] <= 1.0 and per_engine["4x p99/SLO"] <= 1.0
        assert per_engine["B refused"] == 0 and per_engine["Jain 2x"] >= 0.95
        # one core told the sum of the places, without the model, serves less
        assert summed["2x goodput"] < 0.95 < per_engine["2x goodput"]
        assert summed["4x goodput"] < per_engine["4x goodput"]


def test_a_pool_dispatches_to_the_engine_with_the_fewest_requests() -> None:
    profile = load_profile("sglang-cpu")
    trace = Trace(
        arrival=np.array([0.0, 0.0, 0.001, 0.001]),
        tenant=np.zeros(4, dtype=int),
        prompt=np.full(4, 24),
        output=np.full(4, 8),
        tenants=(TenantLoad("t", 1.0),),
        duration_s=1.0,
    )
    lone = drive.run(trace, profile, NoAdmission(), None)
    pool = drive.run(trace, profile, NoAdmission(), None, engines=2)
    alone = unloaded_ttft_s(profile, 24)
    # one request on each engine: each first token as on an idle engine, the next two
    # together behind them on each engine; one engine serves them one after the other
    assert pool.first_token_at[0] == pool.first_token_at[1] == pytest.approx(alone)
    assert pool.first_token_at[2] == pool.first_token_at[3]
    assert lone.first_token_at[1] > pool.first_token_at[1]


def test_the_capacity_search_is_deterministic() -> None:
    profile = load_profile("sglang-cpu")
    assert search_yardstick(profile) == yardstick(profile)


def test_jain_fairness_is_one_for_equal_shares_and_one_over_n_for_one_taker() -> None:
    assert jain([2.0, 2.0, 2.0]) == 1.0
    assert jain([3.0, 0.0, 0.0]) == 1 / 3


def test_the_cli_prints_both_profiles_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "overload.json"
    result = CliRunner().invoke(
        simulate, ["--scenario", "overload", "--seed", "0", "--requests", "40", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "10x faster" in result.output
    record = json.loads(out.read_text())
    assert record["profiles"][0]["profile"] == "sglang-cpu"


def test_the_cli_runs_the_pool_scenario(tmp_path: Path) -> None:
    out = tmp_path / "pool.json"
    args = ["--scenario", "overload-pool", "--seed", "0", "--requests", "40", "--json", str(out)]
    result = CliRunner().invoke(simulate, args)
    assert result.exit_code == 0, result.output
    assert "profile 2 engines of sglang-cpu" in result.output
    assert "core per engine" in result.output
    record = json.loads(out.read_text())
    assert record["scenario"] == "overload-pool"
    assert set(record["profiles"][0]["rows"]) == set(POOL_POLICIES)
