"""Per-tenant rate limits, in the real Redis and in the embedded stand-in: enforced, refilled,
reconciled, and reported."""

from __future__ import annotations

import itertools

import pytest
from prometheus_client import REGISTRY

from loraplex.gateway.admission import (
    Overloaded,
    OverloadShedder,
    RateLimited,
    TenantQuotas,
    Ticket,
)
from tests.integration.gateway_admission.conftest import Backend, FakeClock

RPM = {"requests_per_minute": 3}
TPM = {"tokens_per_minute": 1000}
REQUEST_IDS = itertools.count()


async def admit(
    gate: TenantQuotas, limits: dict[str, int], *, estimated_tokens: int = 1, stream: bool = False
) -> Ticket:
    """Admit one request of tenant "t1" with a fresh id."""
    return await gate.admit(
        "t1",
        limits,
        request_id=f"r{next(REQUEST_IDS)}",
        stream=stream,
        estimated_tokens=estimated_tokens,
    )


async def test_requests_past_the_per_minute_limit_get_429_rate_limit_exceeded(
    admission: TenantQuotas,
) -> None:
    for _ in range(3):
        await admit(admission, RPM)
    with pytest.raises(RateLimited) as refused:
        await admit(admission, RPM)
    assert refused.value.status_code == 429
    assert refused.value.code == "rate_limit_exceeded"
    assert refused.value.headers["Retry-After"] == "20"  # one request refills in 60 s / 3
    assert refused.value.headers["x-ratelimit-remaining-requests"] == "0"


async def test_the_requests_limit_refills_a_request_per_window_over_limit(
    admission: TenantQuotas, clock: FakeClock
) -> None:
    for _ in range(3):
        await admit(admission, RPM)
    clock.advance(19.9)
    with pytest.raises(RateLimited):
        await admit(admission, RPM)
    clock.advance(0.1)
    await admit(admission, RPM)


async def test_the_requests_limit_resets_fully_after_a_window(
    admission: TenantQuotas, clock: FakeClock
) -> None:
    for _ in range(3):
        await admit(admission, RPM)
    clock.advance(60)
    ticket = await admit(admission, RPM)
    assert ticket.headers["x-ratelimit-remaining-requests"] == "2"


async def test_a_reservation_that_does_not_fit_the_tokens_left_is_refused(
    admission: TenantQuotas,
) -> None:
    await admit(admission, TPM, estimated_tokens=700)
    with pytest.raises(RateLimited) as refused:
        await admit(admission, TPM, estimated_tokens=400)
    assert refused.value.code == "rate_limit_exceeded"
    assert refused.value.headers["x-ratelimit-remaining-tokens"] == "300"
    assert refused.value.headers["Retry-After"] == "6"  # 100 tokens at 1000/min


async def test_unused_reserved_tokens_are_given_back_on_release(admission: TenantQuotas) -> None:
    ticket = await admit(admission, TPM, estimated_tokens=800)
    await admission.release(ticket, actual_tokens=100)
    after = await admit(admission, TPM, estimated_tokens=900)
    assert after.headers["x-ratelimit-remaining-tokens"] == "0"


async def test_tokens_used_beyond_the_reservation_are_charged_on_release(
    admission: TenantQuotas,
) -> None:
    ticket = await admit(admission, TPM, estimated_tokens=100)
    await admission.release(ticket, actual_tokens=600)
    with pytest.raises(RateLimited):
        await admit(admission, TPM, estimated_tokens=500)


async def test_releasing_twice_gives_tokens_back_once(admission: TenantQuotas) -> None:
    ticket = await admit(admission, TPM, estimated_tokens=1000)
    await admission.release(ticket, actual_tokens=500)
    await admission.release(ticket, actual_tokens=0)
    with pytest.raises(RateLimited):
        await admit(admission, TPM, estimated_tokens=600)


async def test_a_request_refused_for_tokens_spends_no_request(admission: TenantQuotas) -> None:
    limits = {"requests_per_minute": 2, "tokens_per_minute": 100}
    await admit(admission, limits, estimated_tokens=100)
    with pytest.raises(RateLimited):
        await admit(admission, limits, estimated_tokens=100)
    ticket = await admit(admission, {"requests_per_minute": 2})
    assert ticket.headers["x-ratelimit-remaining-requests"] == "0"


async def test_a_reservation_larger_than_the_tokens_limit_is_refused_as_too_large(
    admission: TenantQuotas,
) -> None:
    with pytest.raises(RateLimited) as refused:
        await admit(admission, TPM, estimated_tokens=1001)
    assert "too large" in refused.value.detail


async def test_used_up_daily_tokens_get_429_insufficient_quota_until_utc_midnight(
    admission: TenantQuotas, clock: FakeClock
) -> None:
    daily = {"daily_tokens": 1000}
    await admit(admission, daily, estimated_tokens=900)
    with pytest.raises(RateLimited) as refused:
        await admit(admission, daily, estimated_tokens=200)
    assert refused.value.code == "insufficient_quota"
    clock.advance(86_400 - clock.now % 86_400)  # the next UTC day
    await admit(admission, daily, estimated_tokens=1000)


async def test_daily_tokens_are_settled_to_what_was_used(admission: TenantQuotas) -> None:
    daily = {"daily_tokens": 1000}
    ticket = await admit(admission, daily, estimated_tokens=900)
    await admission.release(ticket, actual_tokens=300)
    await admit(admission, daily, estimated_tokens=700)


async def test_every_success_carries_the_six_openai_rate_limit_headers(
    admission: TenantQuotas,
) -> None:
    limits = {"requests_per_minute": 60, "tokens_per_minute": 6000}
    ticket = await admit(admission, limits, estimated_tokens=100)
    assert ticket.headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "6000",
        "x-ratelimit-remaining-tokens": "5900",
        "x-ratelimit-reset-tokens": "1s",
    }


async def test_rejections_are_counted_by_reason_and_tenant(admission: TenantQuotas) -> None:
    labels = {"reason": "rpm", "tenant": "t1"}
    before = REGISTRY.get_sample_value("loraplex_admission_rejections_total", labels) or 0.0
    with pytest.raises(RateLimited):
        await admit(admission, {"requests_per_minute": 0})
    assert REGISTRY.get_sample_value("loraplex_admission_rejections_total", labels) == before + 1


async def test_quota_usage_gauges_show_the_fraction_in_use(admission: TenantQuotas) -> None:
    await admit(admission, {"daily_tokens": 1000}, estimated_tokens=250)
    labels = {"tenant": "t1", "limit": "daily_tokens"}
    assert REGISTRY.get_sample_value("loraplex_quota_usage_ratio", labels) == 0.25


async def test_overload_sheds_low_priority_with_503_before_spending_any_quota(
    backend: Backend, prefix: str, redis_client: object, clock: FakeClock
) -> None:
    gate = backend.admission(key_prefix=prefix, clock=clock, overload=OverloadShedder(budget_s=1.0))
    limits = {"requests_per_minute": 1, "priority": 0}
    try:
        with pytest.raises(Overloaded) as shed:
            await gate.admit(
                "t1", limits, request_id="a", stream=False, estimated_tokens=1, estimated_ttft_s=3.0
            )
        assert shed.value.status_code == 503 and shed.value.headers["Retry-After"] == "2"
        premium = {**limits, "priority": 2}  # shed only past 4x the budget
        await gate.admit(
            "t1", premium, request_id="b", stream=False, estimated_tokens=1, estimated_ttft_s=3.0
        )
    finally:
        await gate.aclose()
