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

    def try_take(self, tenant: TenantId, now: float) -> float | None:
        """Spend one cold load; None when allowed, else the time to retry at."""
        per_minute = self._rate(tenant)
        if per_minute is None:
            return None
        interval = 60.0 / per_minute
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(now)
        tat = max(bucket.theoretical_arrival, now)
        allowed_at = tat - interval * self.burst
        if allowed_at > now:
            return allowed_at
        bucket.theoretical_arrival = tat + interval
        return None

    def would_allow(self, tenant: TenantId, now: float) -> bool:
        """Whether `try_take` would succeed now, without spending."""
        per_minute = self._rate(tenant)
        if per_minute is None:
            return True
        bucket = self._buckets.get(tenant)
        if bucket is None:
            return True
        tat = max(bucket.theoretical_arrival, now)
        return tat - 60.0 / per_minute * self.burst <= now
