"""The adapters bench's figures per way: quantiles of completed requests, the requests that
waited, the worst adapter's p99 among the ones asked often enough (the scanner's left out),
loads against their bound, answers against PEFT's, and the targets read off them."""

from __future__ import annotations

import pytest

from loraplex.bench.adapters import backed_off
from loraplex.bench.adapters_replay import Answer
from loraplex.bench.adapters_report import MIN_ADAPTER_REQUESTS, table, way_stats
from loraplex.bench.adapters_verdict import (
    FLOOR,
    LORAPLEX,
    NO_CLIFF,
    PLAIN,
    p99_against_plain,
    targets,
)

SCANNED = 99


def _answers(ttfts_by_adapter: dict[int, list[float]]) -> list[Answer]:
    return [
        Answer(adapter, "q?", False, ttft_s=t, e2e_s=t + 0.5, tokens=16, text="x")
        for adapter, ttfts in ttfts_by_adapter.items()
        for t in ttfts
    ]


def _stats(way: str, answers: list[Answer], checked: tuple[int, int] = (4, 4)):
    return way_stats(
        way, answers, 10.0, lambda a: a == SCANNED, checked, {"cold": 5, "host": 9},
        {"cold": 5, "host": 7, "gpu": 12},
    )  # fmt: skip


def test_a_ways_quantiles_count_only_completed_requests() -> None:
    answers = _answers({0: [0.1] * 50 + [3.0] * 50})
    answers.append(Answer(0, "q?", False, error="503"))
    stats = _stats("w", answers)
    assert (stats.requests, stats.failed, stats.failures) == (101, 1, {"503": 1})
    assert "failed: 1 x 503" in table([stats])
    assert stats.ttft_p50_ms == pytest.approx(1550, rel=0.01)
    assert stats.waited_over_2s == 50
    assert stats.tokens_per_s == pytest.approx(100 * 16 / 10.0)


def test_the_worst_adapter_is_among_often_asked_ones_and_never_the_scanners() -> None:
    enough = MIN_ADAPTER_REQUESTS
    stats = _stats(
        "w",
        _answers({0: [0.1] * enough, 1: [0.2] * enough, 2: [0.3] * enough,
                  3: [9.0] * (enough - 1), SCANNED: [20.0] * enough}),
    )  # fmt: skip
    assert stats.worst_adapter_p99_ms == pytest.approx(300)
    assert stats.median_adapter_p99_ms == pytest.approx(200)


def test_the_table_shows_each_way_and_its_loads_against_the_bound() -> None:
    rows = [_stats(FLOOR, _answers({0: [0.1] * 30})), _stats(LORAPLEX, _answers({0: [0.2] * 30}))]
    text = table(rows)
    assert text.splitlines()[0].split()[:3] == ["way", "req", "fail"]
    assert f"{LORAPLEX}: loads cold 5 (bound 5), host 9 (bound 7)" in text
    assert "answers equal to PEFT's 4/4" in text


def test_targets_pass_when_loraplex_is_near_the_floor_and_far_under_the_plain_way() -> None:
    floor = _stats(FLOOR, _answers({0: [0.1] * 30}))
    plain = _stats(PLAIN, _answers({0: [0.1] * 20 + [5.0] * 10}))
    ours = _stats(LORAPLEX, _answers({0: [0.12] * 30}))
    assert all(line.startswith("PASS") for line in targets([floor, plain, ours]))
    wrong = _stats(LORAPLEX, _answers({0: [0.12] * 30}), checked=(3, 4))
    verdicts = targets([floor, plain, wrong])
    assert [line.split()[0] for line in verdicts] == ["PASS", "PASS", "PASS", "FAIL"]


def test_a_run_too_short_for_per_adapter_p99s_does_not_pass_that_target() -> None:
    floor = _stats(FLOOR, _answers({0: [0.1] * 30}))
    plain = _stats(PLAIN, _answers({0: [0.1] * 20 + [5.0] * 10}))
    few = _stats(LORAPLEX, _answers({0: [0.12] * (MIN_ADAPTER_REQUESTS - 1)}))
    assert [line.split()[0] for line in targets([floor, plain, few])][2] == "UNMEASURED"


def test_without_a_cliff_in_the_plain_way_the_p99_target_is_neither_passed_nor_failed() -> None:
    floor = _stats(FLOOR, _answers({0: [0.1] * 29 + [1.0]}))
    plain = _stats(PLAIN, _answers({0: [0.1] * 29 + [2.0]}))  # 2x the floor's p99: no cliff
    ours = _stats(LORAPLEX, _answers({0: [0.12] * 30}))
    line = targets([floor, plain, ours])[1]
    assert line.startswith("NO CLIFF") and "plain 1.96x" in line


def test_the_offered_rate_backs_off_only_while_the_floor_cannot_keep_up() -> None:
    assert backed_off(2.0, p50_ms=130.0, unloaded_ms=70.0) is None  # under 2x: it stands
    assert backed_off(2.0, p50_ms=460.0, unloaded_ms=70.0) == 2.0 * 0.5


def test_a_cliff_of_loraplexs_own_fails_even_where_the_plain_way_has_none() -> None:
    assert p99_against_plain(floor=50.0, plain=140.0, ours=1000.0)[0] is False
    assert p99_against_plain(floor=50.0, plain=140.0, ours=60.0)[0] == NO_CLIFF
    assert p99_against_plain(floor=float("nan"), plain=140.0, ours=60.0)[0] is None
