"""The overload bench's levels hold enough requests for a p99 that is not their slowest
one, and it tells a stall (slow requests waiting at once) from a tail spread through a
level, so a p99 miss can be read."""

from __future__ import annotations

import pytest

from loraplex.bench.overload import (
    LEVEL_MAX_SECONDS,
    LEVEL_MIN_REQUESTS,
    Outcome,
    _level_seconds,
    _merged,
    _print_targets,
    _shed_by_reason,
)

SLO_MS = 100.0


def test_a_level_at_a_low_rate_runs_until_enough_requests_arrived() -> None:
    assert _level_seconds(10.0, 7.4) * 7.4 >= LEVEL_MIN_REQUESTS  # 2x of 3.7/s: 27 s
    assert _level_seconds(10.0, 40.0) == 10.0  # enough in the time asked for
    assert _level_seconds(10.0, 1.0) == LEVEL_MAX_SECONDS  # within bounds


def _level(requests: list[tuple[float, float]]) -> Outcome:
    """A level of requests sent at `start` seconds whose first token took `ttft` seconds."""
    return Outcome(
        10.0,
        ttfts=[ttft for _, ttft in requests],
        ended=[start + 1.0 for start, _ in requests],
        started=[100.0 + start for start, _ in requests],
    )


def test_slow_requests_waiting_at_once_are_one_spell() -> None:
    stall = [(4.0, 0.6), (4.1, 0.5), (4.3, 0.3)]  # all waiting around 4.3-4.6 s
    fast = [(i * 0.5, 0.05) for i in range(20)]
    assert _level(fast + stall).slow_spells(SLO_MS) == [(4.0, 3)]


def test_slow_requests_apart_are_spells_of_one() -> None:
    spread = [(1.0, 0.2), (5.0, 0.2), (9.0, 0.2)]
    fast = [(i * 0.5, 0.05) for i in range(20)]
    assert _level(fast + spread).slow_spells(SLO_MS) == [(1.0, 1), (5.0, 1), (9.0, 1)]


def test_turns_measured_apart_count_as_one_window() -> None:
    """B's p99 is over all its turns: a stall in one turn is one request of many."""
    calm = _level([(i * 0.1, 0.05) for i in range(60)])
    stalled = _level([(i * 0.1, 0.05) for i in range(59)] + [(6.0, 0.5)])
    stalled.refused = {"503 overloaded": 1}
    merged = _merged([calm, stalled])
    assert (merged.p(0.99), merged.seconds, merged.refused) == (50.0, 20.0, {"503 overloaded": 1})
    assert stalled.p(0.99) == 500.0  # the stalled turn alone: its slowest request


def test_a_neighbours_refusals_are_placed_on_the_same_clock_as_its_requests() -> None:
    """B's slow request can be set beside A's 429s, which a timeline of completed ones lacks."""
    a = _level([(0.0, 0.05), (2.0, 0.05)])
    a.refused_at = [(101.5, "429 rate_limit_exceeded")]  # sent 1.5 s after A's first
    merged = _merged([a, _level([])])
    assert merged.timeline() == [(0.0, 50.0), (2.0, 50.0)]
    assert merged.refusals() == [(1.5, "429 rate_limit_exceeded")]


def _rows(p99_on: float, b_refused: int) -> list[dict]:
    """The rows `_print_targets` reads: uncapped 0.5x and 1x, capped 2x, the neighbours."""
    off = [
        {"level": f, "admission": "off", "p99_vs_unloaded": x}
        for f, x in (("0.5x", 1.6), ("1.0x", 2.3))
    ]
    on = {"level": "2.0x", "admission": "on", "goodput_vs_capacity": 1.4, "p99_vs_unloaded": p99_on}
    b = {"level": "noisy-neighbour", "tenant": "B alone", "refused": {}}
    b_with_a = {
        "level": "noisy-neighbour",
        "tenant": "B with A",
        "refused": {"503 overloaded": b_refused},
        "p99_vs_alone": 1.1,
    }
    return [*off, on, b, b_with_a]


def test_the_bench_ends_with_each_target_met_or_missed(capsys: pytest.CaptureFixture[str]) -> None:
    _print_targets(_rows(p99_on=2.6, b_refused=1))
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("target 2x goodput: met, 1.40 of capacity")
    assert said[1] == (
        "target 2x admitted p99: MISSED, 2.60x unloaded (at most 2.0; uncapped at 0.5x 1.60x, "
        "1.0x 2.30x)"
    )
    assert said[2].startswith("target B's p99 beside A: met")
    assert said[3] == "target B refused: MISSED, 1 requests (none allowed)"
    assert said[4].startswith("note: uncapped at 1x, with nothing refused, p99 was already 2.30x")


def test_the_bench_counts_load_shedding_by_reason_over_all_tenants() -> None:
    metrics = "\n".join(
        [
            "# TYPE loraplex_admission_rejections_total counter",
            'loraplex_admission_rejections_total{reason="waited_too_long",tenant="a"} 3.0',
            'loraplex_admission_rejections_total{reason="waited_too_long",tenant="b"} 1.0',
            'loraplex_admission_rejections_total{reason="engine_busy",tenant="a"} 5.0',
            'loraplex_admission_rejections_total{reason="rpm",tenant="a"} 9.0',
            "",
        ]
    )
    assert _shed_by_reason(metrics) == {"waited_too_long": 4.0, "engine_busy": 5.0}
