"""The canary verdict: promote only after a clean window, roll back on the first bad figures
once the canary has seen its minimum requests, and wait for traffic below it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loraplex.control.canary.policy import CanaryPolicy, Verdict, VersionStats, decide
from loraplex.control.canary.window import p95_of, ttft_bin

POLICY = CanaryPolicy(
    window_s=60, min_requests=20, max_error_rate_diff=0.02, max_ttft_p95_ratio=1.5
)
STABLE = VersionStats(requests=200, server_errors=2, ttft_p95_s=0.10)


def test_a_canary_below_its_minimum_requests_waits_for_traffic_even_past_its_window() -> None:
    decision = decide(STABLE, VersionStats(5, 5, 9.0), POLICY, elapsed_s=600)
    assert decision.verdict is Verdict.WAIT
    assert decision.waiting_for_traffic
    assert decision.reasons == ("waiting for traffic: 5 of 20 requests",)


def test_a_canary_with_more_server_errors_is_rolled_back_before_its_window_ends() -> None:
    decision = decide(STABLE, VersionStats(20, 4, 0.10), POLICY, elapsed_s=10)
    assert decision.verdict is Verdict.ROLLBACK
    assert "server-error rate 20.0%" in decision.reasons[0]
    assert decision.figures["canary"]["requests"] == 20


def test_a_slower_canary_is_rolled_back_naming_its_ttft_ratio() -> None:
    decision = decide(STABLE, VersionStats(30, 0, 0.25), POLICY, elapsed_s=10)
    assert decision.verdict is Verdict.ROLLBACK
    assert decision.figures["ttft_p95_ratio"] == 2.5
    assert "x2.50" in decision.reasons[0]


def test_a_good_canary_waits_for_its_window_then_is_promoted() -> None:
    good = VersionStats(40, 0, 0.11)
    assert decide(STABLE, good, POLICY, elapsed_s=30).verdict is Verdict.WAIT
    decision = decide(STABLE, good, POLICY, elapsed_s=60)
    assert decision.verdict is Verdict.PROMOTE
    assert not decision.waiting_for_traffic


def test_a_ttft_ratio_over_the_limit_passes_while_the_difference_is_a_few_milliseconds() -> None:
    fast = VersionStats(200, 0, 0.004)
    decision = decide(fast, VersionStats(40, 0, 0.012), POLICY, elapsed_s=60)
    assert decision.verdict is Verdict.PROMOTE
    assert decision.figures["ttft_p95_ratio"] == 3.0


def test_error_rates_within_the_allowed_difference_pass() -> None:
    # stable 1 %, canary 2.5 %: 1.5 points more, within the 2 allowed
    decision = decide(STABLE, VersionStats(200, 5, 0.1), POLICY, elapsed_s=60)
    assert decision.verdict is Verdict.PROMOTE


def test_without_stable_ttft_the_ratio_is_not_judged() -> None:
    decision = decide(VersionStats(), VersionStats(25, 0, 3.0), POLICY, elapsed_s=60)
    assert decision.verdict is Verdict.PROMOTE
    assert "no stable TTFT to compare" in decision.reasons


def test_the_policy_survives_its_stored_form() -> None:
    assert CanaryPolicy.from_json(POLICY.to_json()) == POLICY


@given(
    st.integers(0, 500), st.integers(0, 500), st.integers(0, 500), st.integers(0, 500),
    st.floats(0, 600),
)  # fmt: skip
def test_no_canary_is_promoted_below_its_minimum_or_before_its_window(
    stable_n: int, stable_e: int, canary_n: int, canary_e: int, elapsed: float
) -> None:
    stable = VersionStats(stable_n, min(stable_e, stable_n), 0.1 if stable_n else None)
    canary = VersionStats(canary_n, min(canary_e, canary_n), 0.1 if canary_n else None)
    decision = decide(stable, canary, POLICY, elapsed)
    if decision.verdict is Verdict.PROMOTE:
        assert canary_n >= POLICY.min_requests and elapsed >= POLICY.window_s
    if decision.verdict is Verdict.ROLLBACK:
        assert canary_n >= POLICY.min_requests


@given(st.lists(st.floats(0.001, 60), min_size=1, max_size=200))
def test_the_histogram_p95_is_within_ten_percent_above_the_true_one(samples: list[float]) -> None:
    bins: dict[int, int] = {}
    for s in samples:
        bins[ttft_bin(s)] = bins.get(ttft_bin(s), 0) + 1
    ordered = sorted(samples)
    true_p95 = ordered[-(-len(ordered) * 95 // 100) - 1]
    estimate = p95_of(bins)
    assert estimate is not None
    assert true_p95 <= estimate <= true_p95 * 1.1 + 1e-9
