"""Per-tenant cold-load budgets: a token bucket per tenant, kept as GCRA.

The bucket does two jobs. It paces a tenant's fetches from the object store (a cold load
over budget waits for its ticket), and it names the tenants that are *over budget*: those
whose bucket is drained, i.e. who have been loading faster than their plan allows for longer
than the burst covers. A scanning tenant is the typical case. The tiers use that set to
contain such tenants (see cache.py): pacing alone would still let every paced load displace
someone else's adapter.

This is the platform's only cold-load budget. It lives in each policy core (one per base
model in each API process), not in Redis: the core needs the answer synchronously while it
routes, and the set of drained tenants, which no shared counter would give it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .model import TenantId

Rate = Callable[[TenantId], float | None]
_NOBODY: frozenset[TenantId] = frozenset()


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
        self._drained: dict[TenantId, float] = {}  # over budget until this time

    def over_budget(self, now: float) -> frozenset[TenantId]:
        """Tenants whose bucket is drained now: their next cold load would have to wait."""
        if not self._drained:
            return _NOBODY  # the common case; keep it free
        expired = [tenant for tenant, until in self._drained.items() if until <= now]
        for tenant in expired:
            del self._drained[tenant]
        return frozenset(self._drained)

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
            interval = 60.0 / per_minute
            bucket.theoretical_arrival = max(bucket.theoretical_arrival, now) + interval
            refilled = bucket.theoretical_arrival - interval * self.burst
            if refilled > now:
                self._drained[tenant] = refilled
        return at
