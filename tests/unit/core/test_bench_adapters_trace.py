"""The adapters bench's load is the simulator's workload made concrete: the same seed gives
the same trace, popularity is Zipf with a hot set that moves mid-run, a scanner asks for
adapters nobody else does, prompts are short or long; its bound is one no cache beats."""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import replace

import numpy as np
import pytest

from loraplex.bench import adapters_replay
from loraplex.bench.adapters_faster import faster_table
from loraplex.bench.adapters_replay import Way, windows
from loraplex.bench.adapters_trace import (
    LoadShape,
    is_scan,
    make_trace,
    questions_for,
    rank_of,
    resident_trace,
    tier_bounds,
)
from loraplex.bench.adapters_verdict import (
    FLOOR,
    LORAPLEX,
    ORACLE,
    PLAIN,
    loraplex_nodes,
    predicted_targets,
)

SHAPE = LoadShape(slots=8, working_set=4, scan_adapters=16, rate_per_s=20.0, seconds=60.0)


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    _, first = make_trace(SHAPE)
    _, again = make_trace(SHAPE)
    _, other = make_trace(LoadShape(**{**_fields(SHAPE), "seed": 1}))
    assert first == again
    assert [r.adapter for r in first] != [r.adapter for r in other]


def _fields(shape: LoadShape) -> dict:
    return {name: getattr(shape, name) for name in shape.__slots__}


def test_popularity_is_skewed_and_the_hot_set_moves_at_half_time() -> None:
    workload, trace = make_trace(SHAPE)
    halves = [
        Counter(r.adapter for r in trace if (r.at_s < SHAPE.seconds / 2) == first and not is_scan(workload, r.adapter))
        for first in (True, False)
    ]  # fmt: skip
    for counts in halves:
        ordered = sorted(counts.values(), reverse=True)
        assert ordered[0] >= 5 * ordered[len(ordered) // 2]  # Zipf: the head dwarfs the median
    hot_before = {a for a, _ in halves[0].most_common(4)}
    hot_after = {a for a, _ in halves[1].most_common(4)}
    assert not hot_before & hot_after


def test_the_scanner_asks_for_its_own_adapters_each_only_a_few_times() -> None:
    workload, trace = make_trace(SHAPE)
    scanned = Counter(r.adapter for r in trace if is_scan(workload, r.adapter))
    assert set(scanned) == set(range(SHAPE.regular_adapters, SHAPE.adapters))
    assert 0.05 < sum(scanned.values()) / len(trace) < 0.15  # its share: 10%
    assert max(scanned.values()) <= 2 + len(trace) * 0.1 / SHAPE.scan_adapters


def test_prompts_are_short_questions_or_long_passages_ending_in_one() -> None:
    _, trace = make_trace(SHAPE)
    long = [r for r in trace if r.long]
    assert 0.1 < len(long) / len(trace) < 0.4
    for r in trace:
        assert r.question in questions_for(r.adapter)
        assert r.prompt.endswith(r.question)
        assert (len(r.prompt) > 1000) == r.long


def test_adapters_have_every_rank_and_the_workload_says_the_same() -> None:
    workload, _ = make_trace(SHAPE)
    assert {rank_of(i) for i in range(SHAPE.adapters)} == {8, 16, 32, 64}
    assert [a.rank for a in workload.adapters] == [rank_of(i) for i in range(SHAPE.adapters)]


def test_the_floor_keeps_arrivals_and_prompts_on_adapters_that_fit_the_slots() -> None:
    _, trace = make_trace(SHAPE)
    floor = resident_trace(trace, 4)
    assert {r.adapter for r in floor} <= set(range(4))
    assert [(r.at_s, r.prompt) for r in floor] == [(r.at_s, r.prompt) for r in trace]


def _lru_misses(sequence: list[int], capacity: int) -> int:
    held: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for item in sequence:
        if item in held:
            held.move_to_end(item)
            continue
        misses += 1
        held[item] = None
        if len(held) > capacity:
            held.popitem(last=False)
    return misses


def test_no_cache_of_the_clusters_slots_loads_fewer_than_the_bound() -> None:
    workload, _ = make_trace(SHAPE)
    nodes = loraplex_nodes(gpu_slots=4, host_slots=8)
    bounds = tier_bounds(workload.adapter, nodes)
    sequence = workload.adapter.tolist()
    assert bounds.cold == len(set(sequence))
    assert bounds.cold <= bounds.host <= _lru_misses(sequence, 16)
    assert bounds.host <= bounds.gpu <= _lru_misses(sequence, 8)
    assert bounds.gpu > bounds.cold  # the working set is 4x the slots: slots must churn


def test_a_trace_that_fits_the_slots_loads_each_adapter_once() -> None:
    bounds = tier_bounds(np.array([0, 1, 2, 0, 1, 2, 3]), loraplex_nodes(2, 4))
    assert (bounds.cold, bounds.host, bounds.gpu) == (4, 4, 4)


def test_windows_keep_every_request_once_in_order_each_retimed_from_zero() -> None:
    """The ways take turns window by window; a window is the trace's slice, not a sample."""
    _, trace = make_trace(SHAPE)
    cut = windows(trace, 4, SHAPE.seconds)
    length = SHAPE.seconds / 4
    assert [r.adapter for w in cut for r in w] == [r.adapter for r in trace]
    assert all(0 <= r.at_s < length + 1e-9 for w in cut[:-1] for r in w)
    assert all(r.at_s >= 0 for r in cut[-1])  # the last window also holds any late arrival
    assert [r.at_s + k * length for k, w in enumerate(cut) for r in w] == [
        pytest.approx(r.at_s) for r in trace
    ]


async def test_the_ways_take_turns_each_window_the_order_rotating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whichever way goes first in one window goes last in the next, so no way always runs
    right after another's load; each way gets its own answers back, in trace order."""
    _, trace = make_trace(SHAPE)
    runs: list[tuple[str, int]] = []

    async def replay(url: str, window: list, send_for: object) -> tuple[list, float]:
        runs.append((url, len(runs) // 3))
        return [(url, r.adapter) for r in window], 1.0

    monkeypatch.setattr(adapters_replay, "replay", replay)
    ways = [Way(name, name, trace, lambda r: None) for name in ("a", "b", "c")]  # type: ignore[arg-type]
    results = await adapters_replay.interleaved(ways, 3, SHAPE.seconds)
    assert runs == [
        ("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1), ("c", 2), ("a", 2), ("b", 2)
    ]  # fmt: skip
    for name, done in zip("abc", results, strict=True):
        assert done.answers == [(name, r.adapter) for r in trace] and done.wall_s == 3.0


async def test_a_ways_warm_up_runs_before_each_of_its_windows_and_is_not_charged_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The floor behind the gateway loads its adapters before each window: those requests
    are neither among its answers nor in the loads it is charged; the loads each way's own
    requests make are charged to that way alone."""
    _, trace = make_trace(SHAPE)
    warm = replace(trace[0], question="warm-up")
    loads = {"loaded": 0.0}
    calls: list[str] = []

    async def replay(url: str, window: list, send_for: object) -> tuple[list, float]:
        calls.append("warm" if window[0].question == "warm-up" else url)
        loads["loaded"] += {"warm": 100, "floor": 1, "ours": 10}[calls[-1]]
        return [(url, r.adapter) for r in window], 1.0

    monkeypatch.setattr(adapters_replay, "replay", replay)
    floor = Way("floor", "floor", trace, lambda r: None, (warm,))  # type: ignore[arg-type]
    ours = Way("ours", "ours", trace, lambda r: None)  # type: ignore[arg-type]
    done = await adapters_replay.interleaved([floor, ours], 2, SHAPE.seconds, lambda: dict(loads))
    assert calls == ["warm", "floor", "ours", "ours", "warm", "floor"]
    assert done[0].answers == [("floor", r.adapter) for r in trace]
    assert done[0].grew == {"loaded": 2.0} and done[1].grew == {"loaded": 20.0}


def test_the_simulators_verdicts_read_each_way_by_name() -> None:
    rows = {
        PLAIN: {"ttft_p50_s": 0.034, "ttft_p99_s": 0.9},
        LORAPLEX: {"ttft_p50_s": 0.030, "ttft_p99_s": 0.2},
        FLOOR: {"ttft_p50_s": 0.021, "ttft_p99_s": 0.1},
    }
    p50, p99 = predicted_targets(rows)
    assert p50.startswith("simulator: PASS") and "30 vs 21 ms (plain 34 ms)" in p50
    assert p99.startswith("simulator: PASS") and "900 vs 200 ms" in p99
    rows[ORACLE] = {"ttft_p50_s": 0.042}
    assert "out of reach of any eviction" in predicted_targets(rows)[2]
    rows[ORACLE] = {"ttft_p50_s": 0.025}
    assert "within reach of eviction" in predicted_targets(rows)[2]


def test_at_a_gpus_rate_each_rate_is_judged_against_the_floor_as_live() -> None:
    rows = [
        {"rate_rps": 5.0, FLOOR: (23, 50), LORAPLEX: (30, 100), PLAIN: (40, 400)},
        {"rate_rps": 20.0, FLOOR: (23, 50), LORAPLEX: (30, 60), PLAIN: (40, 90)},
    ]
    lines = faster_table(rows).splitlines()
    assert "PASS (plain 8.0x, Loraplex 2.0x" in lines[2]
    assert "NO CLIFF (plain 1.8x" in lines[3]  # under 3x the floor's: nothing to be under
