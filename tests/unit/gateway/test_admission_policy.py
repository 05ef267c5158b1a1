"""Admission policy: bucket arithmetic, OpenAI headers, TTFT estimates and shedding order."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

import loraplex.gateway.admission as admission
from loraplex.gateway.admission import Overloaded, OverloadShedder, RateLimited
from loraplex.gateway.admission.policy import (
    BucketState,
    EngineLoad,
    allowed_wait_s,
    best_estimate_s,
    decide_shed,
    estimate_ttft_s,
    format_duration,
    queue_wait_s,
    ratelimit_headers,
    refill,
    retry_after,
    seconds_to_utc_midnight,
    usage_ratios,
    utc_day,
)

BUDGET = 2.0


def test_public_surface_is_what_the_gateway_imports() -> None:
    surface = (
        "EngineLoad FailMode LimiterUnavailable OverloadShedder Overloaded RateLimited "
        "ShedDecision TenantQuotas Ticket"
    )
    assert sorted(admission.__all__) == surface.split()


def test_durations_are_written_like_openai_reset_headers() -> None:
    assert format_duration(0) == "0s"
    assert format_duration(0.02) == "20ms"
    assert format_duration(1) == "1s"
    assert format_duration(8.64) == "8.64s"
    assert format_duration(360) == "6m0s"
    assert format_duration(3723) == "1h2m3s"


def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one() -> None:
    assert retry_after(0.0) == "1"
    assert retry_after(0.2) == "1"
    assert retry_after(1.5) == "2"
    assert retry_after(math.inf) == "60"


def test_a_bucket_refills_at_limit_per_window_up_to_its_limit() -> None:
    assert refill(0, 60, 1.0) == 1.0
    assert refill(10, 60, 30.0) == 40.0
    assert refill(50, 60, 3600.0) == 60.0


def test_refill_never_runs_backwards_when_a_clock_lags() -> None:
    assert refill(10, 60, -5.0) == 10.0


def test_remaining_is_whole_units_and_never_negative() -> None:
    assert BucketState(100, 41.7).remaining == 41
    assert BucketState(100, -12.0).remaining == 0


def test_reset_is_the_time_until_the_bucket_is_full() -> None:
    assert BucketState(60, 60).reset_s == 0.0
    assert BucketState(60, 0).reset_s == 60.0
    assert BucketState(200_000, 100_000).reset_s == 30.0


def test_wait_for_is_the_time_until_the_cost_fits() -> None:
    bucket = BucketState(600, 0.5)
    assert bucket.wait_for(1) == 0.05
    assert bucket.wait_for(0) == 0.0


def test_a_cost_above_the_limit_never_fits() -> None:
    assert math.isinf(BucketState(100, 100).wait_for(101))
    assert math.isinf(BucketState(0, 0).wait_for(1))


def test_daily_tokens_reset_at_utc_midnight() -> None:
    one_am = 20_000 * 86_400 + 3600.0
    assert seconds_to_utc_midnight(one_am) == 23 * 3600
    assert utc_day(one_am) == 20_000
    assert utc_day(one_am + 23 * 3600) == 20_001


def test_headers_carry_limit_remaining_and_reset_for_requests_and_tokens() -> None:
    headers = ratelimit_headers(BucketState(60, 59), BucketState(150_000, 149_000))
    assert headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "150000",
        "x-ratelimit-remaining-tokens": "149000",
        "x-ratelimit-reset-tokens": "400ms",
    }


def test_headers_leave_out_limits_the_tenant_does_not_have() -> None:
    assert ratelimit_headers(None, None) == {}
    assert set(ratelimit_headers(BucketState(10, 10), None)) == {
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    }


def test_a_request_waits_for_everyone_ahead_on_a_single_slot_engine() -> None:
    assert queue_wait_s(EngineLoad(in_flight=1, queued=3, service_s=0.5)) == 2.0


def test_a_request_waits_nothing_while_a_batch_slot_is_free() -> None:
    assert queue_wait_s(EngineLoad(in_flight=3, queued=0, service_s=2.0, parallelism=4)) == 0.0


def test_a_full_batch_frees_slots_at_parallelism_per_service_time() -> None:
    load = EngineLoad(in_flight=8, queued=4, service_s=2.0, parallelism=8)
    assert queue_wait_s(load) == 5 * 2.0 / 8


def test_the_estimate_adds_adapter_load_and_prefill_of_the_prompt() -> None:
    load = EngineLoad(
        in_flight=2, queued=0, service_s=1.0, adapter_load_s=0.3, prefill_tokens_per_s=1000.0
    )
    assert estimate_ttft_s(load, prompt_tokens=500) == 2.0 + 0.3 + 0.5


def test_an_unmeasured_prefill_speed_adds_nothing() -> None:
    assert estimate_ttft_s(EngineLoad(0, 0, 1.0), prompt_tokens=10_000) == 0.0


def test_the_estimate_is_that_of_the_best_candidate_engine() -> None:
    busy, idle = EngineLoad(5, 5, 1.0), EngineLoad(0, 0, 1.0, adapter_load_s=0.4)
    assert best_estimate_s([busy, idle], prompt_tokens=0) == 0.4


def test_no_candidate_engine_means_an_infinite_wait() -> None:
    assert math.isinf(best_estimate_s([], prompt_tokens=10))


def test_priority_classes_are_shed_at_one_two_and_four_budgets() -> None:
    assert [allowed_wait_s(p, BUDGET) for p in (0, 1, 2)] == [2.0, 4.0, 8.0]


def test_a_request_exactly_at_its_allowance_is_admitted() -> None:
    assert decide_shed(2.0, 0, BUDGET).admit
    assert not decide_shed(2.001, 0, BUDGET).admit


def test_lowest_priority_is_shed_first_as_the_estimate_rises() -> None:
    admitted = {
        estimate: [decide_shed(estimate, p, BUDGET).admit for p in (0, 1, 2)]
        for estimate in (1.0, 3.0, 6.0, 9.0)
    }
    assert admitted == {
        1.0: [True, True, True],
        3.0: [False, True, True],
        6.0: [False, False, True],
        9.0: [False, False, False],
    }


def test_priorities_beyond_the_known_classes_use_the_nearest_one() -> None:
    assert allowed_wait_s(7, BUDGET) == allowed_wait_s(2, BUDGET)
    assert allowed_wait_s(-1, BUDGET) == allowed_wait_s(0, BUDGET)


def test_a_shed_request_is_told_to_retry_after_the_excess_wait() -> None:
    decision = decide_shed(5.5, 0, BUDGET)
    assert not decision.admit and decision.retry_after_s == 3.5


@given(
    estimate=st.floats(min_value=0, max_value=1e4, allow_nan=False),
    low=st.integers(min_value=0, max_value=5),
    step=st.integers(min_value=0, max_value=5),
)
def test_whenever_a_priority_is_admitted_every_higher_one_is_too(
    estimate: float, low: int, step: int
) -> None:
    if decide_shed(estimate, low, BUDGET).admit:
        assert decide_shed(estimate, low + step, BUDGET).admit


@given(estimate=st.floats(min_value=0, max_value=1e4, allow_nan=False))
def test_no_priority_is_admitted_past_the_top_multiple(estimate: float) -> None:
    if estimate > 4 * BUDGET:
        assert not any(decide_shed(estimate, p, BUDGET).admit for p in range(10))


def test_usage_ratios_are_fractions_of_the_limits_that_exist() -> None:
    ratios = usage_ratios(
        {"daily_tokens": 50, "concurrent_requests": 3, "concurrent_streams": 9},
        {"daily_tokens": 200, "concurrent_requests": 0},
    )
    assert ratios == {"daily_tokens": 0.25, "concurrent_requests": 1.0}


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_controller_uses_a_default_service_time_before_measuring() -> None:
    controller = OverloadShedder(budget_s=BUDGET, default_service_s=0.7, clock=FakeClock())
    assert controller.load("e1", in_flight=1, queued=0).service_s == 0.7


def test_the_controller_follows_measured_service_time_more_for_older_samples() -> None:
    clock = FakeClock()
    controller = OverloadShedder(budget_s=BUDGET, half_life_s=10.0, clock=clock)
    controller.observe("e1", service_s=1.0)
    clock.now = 10.0  # one half-life later: the new sample counts half
    controller.observe("e1", service_s=3.0)
    assert controller.load("e1", in_flight=0, queued=0).service_s == 2.0


def test_the_controller_measures_prefill_speed_per_engine() -> None:
    controller = OverloadShedder(budget_s=BUDGET, clock=FakeClock())
    controller.observe("e1", service_s=1.0, prompt_tokens=2000, prefill_s=0.5)
    assert controller.load("e1", in_flight=0, queued=0).prefill_tokens_per_s == 4000.0
    assert controller.load("e2", in_flight=0, queued=0).prefill_tokens_per_s == 0.0


def test_the_controller_sheds_with_its_budget_and_multiples() -> None:
    controller = OverloadShedder(budget_s=1.0, multiples=(1.0, 3.0), clock=FakeClock())
    loads = [controller.load("e1", in_flight=2, queued=0)]
    estimate = controller.estimate_s(loads, prompt_tokens=0)
    assert estimate == 2.0
    assert [controller.decide(estimate, p).admit for p in (0, 1)] == [False, True]


def test_refusals_answer_with_openai_status_codes_and_headers() -> None:
    limited = RateLimited("insufficient_quota", "quota", {"Retry-After": "5"})
    shed = Overloaded("3")
    assert (limited.status_code, limited.code, limited.headers) == (
        429,
        "insufficient_quota",
        {"Retry-After": "5"},
    )
    assert (shed.status_code, shed.headers["Retry-After"]) == (503, "3")
