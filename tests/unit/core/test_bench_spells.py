"""The overload bench tells a stall (slow requests waiting at once) from a tail spread
through a level, so a p99 miss can be read."""

from __future__ import annotations

from loraplex.bench.overload import Outcome

SLO_MS = 100.0


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
