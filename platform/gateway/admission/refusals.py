"""Turning a refused admission into OpenAI's error and headers, and the quota gauges."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from loraplex.control.budgets.money import BudgetLine, budget_name, format_amount, period_reset
from loraplex.gateway.admission.errors import BudgetExceeded, RateLimited
from loraplex.gateway.admission.limiter import Outcome
from loraplex.gateway.admission.policy import (
    format_duration,
    ratelimit_headers,
    retry_after,
    seconds_to_utc_midnight,
    usage_ratios,
)
from loraplex.observability.metrics import QUOTA_USAGE

# QUOTA_FIELDS name -> the short `reason` label of loraplex_admission_rejections.
REASONS = {
    "requests_per_minute": "rpm",
    "tokens_per_minute": "tpm",
    "daily_tokens": "daily_tokens",
    "concurrent_requests": "concurrency",
    "concurrent_streams": "streams",
}
# Nothing says when another request or stream ends; a second is a polite first retry.
CONCURRENCY_RETRY_S = 1.0

Reject = Callable[[str, str], None]  # (reason label, tenant) -> counts the rejection


def refuse_if_too_large(tenant: str, limits: Mapping[str, int], cost: int, reject: Reject) -> None:
    """A reservation above tokens/min can never fit: refuse without asking Redis."""
    tpm = limits.get("tokens_per_minute")
    if tpm is not None and cost > tpm:
        reject("too_large", tenant)
        raise RateLimited(
            "rate_limit_exceeded",
            f"Request too large: it reserves {cost} tokens (prompt + max_tokens) and the "
            f"limit is {tpm} tokens per minute. Lower max_tokens or shorten the prompt.",
            {},
        )


def refusal(outcome: Outcome, cost: int, now: float, reject: Reject, tenant: str) -> RateLimited:
    """The error for a refused outcome, with Retry-After and the rate-limit headers."""
    reason = outcome.reason
    reject(REASONS.get(reason, reason), tenant)
    headers = ratelimit_headers(outcome.requests, outcome.tokens)
    if reason == "daily_tokens":
        wait = seconds_to_utc_midnight(now)
        headers["Retry-After"] = retry_after(wait)
        return RateLimited(
            "insufficient_quota",
            f"Daily token quota used up ({outcome.daily_used} used, {cost} requested); "
            f"it resets at 00:00 UTC, in {format_duration(wait)}.",
            headers,
        )
    wait = _wait_s(outcome, cost)
    headers["Retry-After"] = retry_after(wait)
    return RateLimited("rate_limit_exceeded", _message(outcome, cost, wait), headers)


def concurrency_refusal(held: int, reject: Reject, tenant: str) -> RateLimited:
    """The 429 for a request beyond the `held` requests its plan lets it run at once."""
    reject(REASONS["concurrent_requests"], tenant)
    wait = CONCURRENCY_RETRY_S
    return RateLimited(
        "rate_limit_exceeded",
        f"Too many requests in flight ({held}). Try again in {format_duration(wait)}.",
        {"Retry-After": retry_after(wait)},
    )


def budget_refusal(
    line: BudgetLine, spent: int, amount: int, now: float, currency: str
) -> BudgetExceeded:
    """The 429 for a request whose reservation would pass `line`: which budget, how much
    is spent, and when it starts again (also as Retry-After and `x-loraplex-budget-reset`)."""
    moment = datetime.fromtimestamp(now, UTC)
    reset = period_reset(line.period, moment)
    wait = (reset - moment).total_seconds()
    limit, used, asked = (f"{format_amount(v)} {currency}" for v in (line.amount, spent, amount))
    message = (
        f"Budget exceeded: {budget_name(line)} ({line.id}) is {limit}; {used} is spent or "
        f"reserved and this request reserves up to {asked}. It resets at "
        f"{reset.strftime('%Y-%m-%dT%H:%M:%SZ')}, in {format_duration(wait)}."
    )
    headers = {
        "Retry-After": retry_after(wait),
        "x-loraplex-budget": line.id,
        "x-loraplex-budget-reset": reset.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return BudgetExceeded(message, headers)


def _wait_s(outcome: Outcome, cost: int) -> float:
    if outcome.reason == "requests_per_minute" and outcome.requests is not None:
        return outcome.requests.wait_for(1)
    if outcome.reason == "tokens_per_minute" and outcome.tokens is not None:
        return outcome.tokens.wait_for(cost)
    return CONCURRENCY_RETRY_S


def _message(outcome: Outcome, cost: int, wait: float) -> str:
    after = "later" if math.isinf(wait) else f"in {format_duration(wait)}"
    if outcome.reason == "requests_per_minute" and outcome.requests is not None:
        return (
            f"Rate limit reached for requests per minute: limit {outcome.requests.limit}, "
            f"remaining {outcome.requests.remaining}. Try again {after}."
        )
    if outcome.reason == "tokens_per_minute" and outcome.tokens is not None:
        return (
            f"Rate limit reached for tokens per minute: limit {outcome.tokens.limit}, "
            f"remaining {outcome.tokens.remaining}, requested {cost}. Try again {after}."
        )
    if outcome.reason == "concurrent_streams":
        return f"Too many streams in flight ({outcome.streams_held}). Try again {after}."
    return f"Too many requests in flight ({outcome.requests_held}). Try again {after}."


def set_usage_gauges(tenant_label: str, limits: Mapping[str, int], outcome: Outcome) -> None:
    """Publish how much of each limit the tenant is using, as of this decision."""
    used: dict[str, float] = {
        "daily_tokens": outcome.daily_used,
        "concurrent_requests": outcome.requests_held,
        "concurrent_streams": outcome.streams_held,
    }
    if outcome.requests is not None:
        used["requests_per_minute"] = outcome.requests.limit - max(0.0, outcome.requests.level)
    if outcome.tokens is not None:
        used["tokens_per_minute"] = outcome.tokens.limit - max(0.0, outcome.tokens.level)
    for name, ratio in usage_ratios(used, limits).items():
        QUOTA_USAGE.labels(tenant_label, name).set(ratio)
