"""The lower bound on cold loads (simulator/bound.py): Belady's MIN on one cache, checked
against brute force on small traces, and below every policy the simulator runs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loraplex.serving.simulator.bound import min_misses
from loraplex.serving.simulator.scenarios import ClusterShape, shifting
from loraplex.serving.simulator.workload import WorkloadSpec


def _fewest_misses_by_search(sequence: list[int], capacity: int) -> int:
    """Every eviction choice tried: the true optimum, for short traces only."""
    best = {frozenset(): 0}  # cache contents -> fewest misses to reach them
    for item in sequence:
        after: dict[frozenset[int], int] = {}
        for held, misses in best.items():
            if item in held:
                options = [(held, misses)]
            elif len(held) < capacity:
                options = [(held | {item}, misses + 1)]
            else:
                options = [((held - {v}) | {item}, misses + 1) for v in held]
            for state, count in options:
                after[state] = min(count, after.get(state, count))
        best = after
    return min(best.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=14), st.integers(1, 4))
def test_min_equals_the_optimum_found_by_search(sequence: list[int], capacity: int) -> None:
    assert min_misses(np.array(sequence, dtype=np.int64), capacity) == _fewest_misses_by_search(
        sequence, capacity
    )


def test_a_cache_holding_everything_misses_once_per_adapter() -> None:
    sequence = np.array([3, 1, 3, 2, 1, 3] * 5)
    assert min_misses(sequence, 3) == 3 and min_misses(sequence, 2) > 3


def test_no_policy_in_the_shifting_scenario_goes_below_the_bound() -> None:
    spec = WorkloadSpec(requests=4_000, adapters=300, rate_per_s=12.0, seed=1)
    shape = ClusterShape(host_slots=8, disk_budget_bytes=10**9)  # even the bound evicts
    rows = shifting(spec, shape)
    for row in rows:
        assert row["cold_loads"] >= row["cold_load_bound"], row["policy"]
    assert rows[0]["cold_load_bound"] > 300  # more than one load per adapter
