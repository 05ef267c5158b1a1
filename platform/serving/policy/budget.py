"""Per-tenant cold-load budgets: a token bucket per tenant, kept as GCRA."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loraplex.serving.policy.model import TenantId

Rate = Callable[[TenantId], float | None]


@dataclass(slots=True)
class _Bucket:
    theoretical_arrival: float = 0.0


class ColdLoadBudget:
    """Cold loads per minute per tenant, with a burst.

    GCRA is the token bucket written as one timestamp per tenant, so a check is O(1) and
    the answer to "when may I?" is exact. `rate(tenant)` is loads per minute from the plan;
    None means unlimited.
    """

    def __init__(self, rate: Rate, burst: int) -> None:
        self._rate = rate
        self.burst = burst
        self._buckets: dict[TenantId, _Bucket] = {}

    def would_allow(self, tenant: TenantId, now: float) -> bool:
        """Whether a cold load now fits the budget."""
        return self.ready_at(tenant, now) <= now

    def ready_at(self, tenant: TenantId, now: float) -> float:
        """The earliest time the tenant's next cold load fits."""
        per_minute = self._rate(tenant)
        bucket = self._buckets.get(tenant)
        if per_minute is None or bucket is None:
            return now
        return max(now, bucket.theoretical_arrival - 60.0 / per_minute * self.burst)

    def reserve(self, tenant: TenantId, now: float) -> float:
        """Book the tenant's next cold load; returns when it may happen (now, or later).

        Booking at deferral time gives each deferred request a ticket, so it retries once,
        at its time, instead of every deferred request re-checking the bucket together.
        """
        at = self.ready_at(tenant, now)
        per_minute = self._rate(tenant)
        if per_minute is not None:
            bucket = self._buckets.get(tenant)
            if bucket is None:
                bucket = self._buckets[tenant] = _Bucket(now)
            bucket.theoretical_arrival = max(bucket.theoretical_arrival, now) + 60.0 / per_minute
        return at
