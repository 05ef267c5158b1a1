"""Per-tenant reuse: how often a tenant asks for an adapter the cluster already holds.

Over its cold-load budget, a heavy tenant warming up and a scanning tenant look alike: both
load faster than their plan allows. Reuse tells them apart. A warming tenant's requests
mostly go to adapters it loaded moments ago (its hot ones) while its tail is still loading;
a scanner comes back to an adapter only after a whole cycle, by which time a contained tenant's
copy is long gone, so nearly all its requests miss. Containment (cache.py) lets the first keep
growing into free space and makes the second recycle its own.
"""

from __future__ import annotations

import math

from .model import TenantId


class TenantReuse:
    """Hits and misses per tenant, exponentially decayed so recent behaviour counts most."""

    def __init__(self, half_life_s: float) -> None:
        self._decay_per_s = math.log(2) / half_life_s
        self._counts: dict[TenantId, tuple[float, float, float]] = {}  # hits, misses, at

    def record(self, tenant: TenantId, hit: bool, now: float) -> None:
        """Count one request: `hit` when its adapter was already somewhere in the cluster."""
        hits, misses, at = self._counts.get(tenant, (0.0, 0.0, now))
        if now > at:
            kept = math.exp(-(now - at) * self._decay_per_s)
            hits, misses = hits * kept, misses * kept
        if hit:
            hits += 1.0
        else:
            misses += 1.0
        self._counts[tenant] = (hits, misses, max(at, now))

    def mostly_misses(self, tenant: TenantId) -> bool:
        """Whether most of the tenant's recent requests needed a cold load.

        Decay scales hits and misses alike, so comparing the stored values needs no clock.
        """
        hits, misses, _ = self._counts.get(tenant, (0.0, 0.0, 0.0))
        return misses > hits
