"""Admission policy as pure functions: rate-limit arithmetic, headers, and overload shedding.

Nothing here does I/O or reads a clock; the limiter and the overload controller hand in
the state and the time, so the live gateway and the simulator share these decisions.

Rate limits are token buckets (the model behind OpenAI's headers): a bucket holds up to
`limit` units and refills continuously at `limit / window_s` per second. A request takes
1 unit of the requests bucket and its reserved tokens from the tokens bucket. So
`remaining` is the bucket's level, `reset` is the time until it is full again (OpenAI's
"time until the limit resets to its initial state"), and a refused request may retry once
the bucket holds what it asked for. Over any window a tenant gets at most `limit` plus what
refilled meanwhile; no fixed-window edge lets it burst 2x at a boundary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WINDOW_S = 60.0
DAY_S = 86_400
# Budget multiples at which each priority class is shed; a class above the last listed one
# uses the last. Lowest priority goes first, and even the top class is shed past its
# multiple so no queue grows without bound.
DEFAULT_SHED_MULTIPLES: tuple[float, ...] = (1.0, 2.0, 4.0)


@dataclass(frozen=True)
class BucketState:
    """A token bucket after a decision: its limit and the level left in it."""

    limit: int
    level: float
    window_s: float = WINDOW_S

    @property
    def remaining(self) -> int:
        """Whole units left now (never negative: an overdraft shows as 0)."""
        return max(0, math.floor(self.level))

    @property
    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        return seconds_to_level(self, self.limit)

    def wait_for(self, cost: int) -> float:
        """Seconds until the bucket holds `cost` units (inf when it never can)."""
        return seconds_to_level(self, cost)


def seconds_to_level(bucket: BucketState, level: float) -> float:
    """Seconds of refill until `bucket` reaches `level`."""
    if bucket.level >= level:
        return 0.0
    if bucket.limit <= 0 or level > bucket.limit:
        return math.inf
    return (level - bucket.level) * bucket.window_s / bucket.limit


def refill(level: float, limit: int, elapsed_s: float, window_s: float = WINDOW_S) -> float:
    """The level of a bucket `elapsed_s` after it held `level` (the Lua script does the same)."""
    if limit <= 0:
        return min(level, 0.0)
    return min(float(limit), level + max(0.0, elapsed_s) * limit / window_s)


def seconds_to_utc_midnight(now: float) -> float:
    """Seconds from `now` (Unix time) to the next UTC midnight, when daily tokens reset."""
    return DAY_S - (now % DAY_S)


def utc_day(now: float) -> int:
    """The UTC day number of `now`, the key of the daily token counter."""
    return int(now // DAY_S)


def format_duration(seconds: float) -> str:
    """A duration the way OpenAI's reset headers write it: "20ms", "1s", "6m0s", "1h2m3s"."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs = f"{millis / 1000:.3f}".rstrip("0").rstrip(".")
    text = f"{secs}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return text


def retry_after(seconds: float) -> str:
    """`Retry-After` in whole seconds, at least 1 (the header takes no fractions)."""
    if math.isinf(seconds):
        return str(int(WINDOW_S))
    return str(max(1, math.ceil(seconds)))


def ratelimit_headers(requests: BucketState | None, tokens: BucketState | None) -> dict[str, str]:
    """OpenAI's `x-ratelimit-*` headers for the buckets a tenant has (none for no limit)."""
    headers: dict[str, str] = {}
    for name, bucket in (("requests", requests), ("tokens", tokens)):
        if bucket is None:
            continue
        headers[f"x-ratelimit-limit-{name}"] = str(bucket.limit)
        headers[f"x-ratelimit-remaining-{name}"] = str(bucket.remaining)
        reset = bucket.reset_s
        headers[f"x-ratelimit-reset-{name}"] = format_duration(
            bucket.window_s if math.isinf(reset) else reset
        )
    return headers


@dataclass(frozen=True)
class EngineLoad:
    """What a new request would find on one candidate engine."""

    in_flight: int  # requests the engine is running
    queued: int  # requests the gateway holds for it, not yet sent
    service_s: float  # measured (EWMA) seconds one request occupies a batch slot
    parallelism: int = 1  # requests it runs at once (batch slots)
    adapter_load_s: float = 0.0  # bringing the adapter to a usable tier there; 0 if active
    prefill_tokens_per_s: float = 0.0  # measured prefill speed; 0 = unknown, not counted


def queue_wait_s(load: EngineLoad) -> float:
    """Seconds before a batch slot frees up for a request arriving now.

    With `p` slots and `n` requests ahead, the newcomer starts after `n - p + 1` of them
    finish, and slots finish at `p / service_s` per second.
    """
    slots = max(1, load.parallelism)
    ahead = load.in_flight + load.queued
    return max(0, ahead - slots + 1) * max(0.0, load.service_s) / slots


def estimate_ttft_s(load: EngineLoad, prompt_tokens: int) -> float:
    """Estimated time to first token on one engine: queue, adapter load, then prefill."""
    prefill = prompt_tokens / load.prefill_tokens_per_s if load.prefill_tokens_per_s > 0 else 0.0
    return queue_wait_s(load) + max(0.0, load.adapter_load_s) + prefill


def best_estimate_s(loads: Sequence[EngineLoad], prompt_tokens: int) -> float:
    """The estimate on the best candidate engine (inf when there is none)."""
    return min((estimate_ttft_s(load, prompt_tokens) for load in loads), default=math.inf)


@dataclass(frozen=True)
class ShedDecision:
    """Admit, or shed with how long until the load should have drained enough."""

    admit: bool
    estimate_s: float
    allowed_s: float
    retry_after_s: float = 0.0


def allowed_wait_s(
    priority: int, budget_s: float, multiples: Sequence[float] = DEFAULT_SHED_MULTIPLES
) -> float:
    """The largest estimated TTFT at which a request of `priority` is still admitted."""
    if not multiples:
        return math.inf
    index = min(max(0, priority), len(multiples) - 1)
    return budget_s * multiples[index]


def decide_shed(
    estimate_s: float,
    priority: int,
    budget_s: float,
    multiples: Sequence[float] = DEFAULT_SHED_MULTIPLES,
) -> ShedDecision:
    """Shed a request whose estimated TTFT is past its priority class's allowance.

    Retry-After is the excess: with no new arrivals the queue drains about a second of
    wait per second, so that is when a retry would fit again.
    """
    allowed = allowed_wait_s(priority, budget_s, multiples)
    if estimate_s <= allowed:
        return ShedDecision(True, estimate_s, allowed)
    excess = estimate_s - allowed if not math.isinf(estimate_s) else WINDOW_S
    return ShedDecision(False, estimate_s, allowed, excess)


def usage_ratios(used: Mapping[str, float], limits: Mapping[str, int]) -> dict[str, float]:
    """Fraction of each limit in use, for the quota usage gauges (limits of 0 count as full)."""
    ratios: dict[str, float] = {}
    for name, value in used.items():
        limit = limits.get(name)
        if limit is None:
            continue
        ratios[name] = min(1.0, value / limit) if limit > 0 else 1.0
    return ratios
