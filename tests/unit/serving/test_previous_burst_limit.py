"""An engine's limit on prefills at once in a flood: learned from bursts seen too slow."""

from __future__ import annotations

from loraplex.serving.simulator.overload.previous_gate.burst_limit import (
    FLOOR,
    GROW_AFTER,
    BurstLimit,
)


def test_no_limit_until_a_burst_is_seen_too_slow() -> None:
    burst = BurstLimit()
    for peak in (1, 2, 5):
        burst.on_first_token(over_tail=False, peak=peak)  # bursts in time
    assert burst.limit is None
    burst.on_first_token(over_tail=True, peak=4)  # four prefilled together: one too slow
    assert burst.limit == 3


def test_a_pair_or_a_lone_request_over_the_tail_is_a_stall_and_sets_no_limit() -> None:
    burst = BurstLimit()
    for peak in (1, FLOOR):
        burst.on_first_token(over_tail=True, peak=peak)
    assert burst.limit is None


def test_a_slower_burst_lowers_the_limit_but_never_under_the_floor() -> None:
    burst = BurstLimit()
    burst.on_first_token(over_tail=True, peak=6)
    burst.on_first_token(over_tail=True, peak=FLOOR + 1)
    assert burst.limit == FLOOR
    burst.on_first_token(over_tail=True, peak=5)  # a larger burst does not raise it
    assert burst.limit == FLOOR


def test_a_long_run_in_time_at_the_limit_raises_it_by_one() -> None:
    burst = BurstLimit()
    burst.on_first_token(over_tail=True, peak=3)
    for _ in range(GROW_AFTER - 1):
        burst.on_first_token(over_tail=False, peak=2)
    burst.on_first_token(over_tail=False, peak=1)  # below the limit: says nothing of it
    assert burst.limit == 2
    burst.on_first_token(over_tail=False, peak=2)
    assert burst.limit == 3
