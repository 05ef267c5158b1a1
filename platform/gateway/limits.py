"""A short cache of each tenant's limits, so the hot path does not query them per request."""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.tenants.service import limits_of


class TenantLimits:
    """Effective limits per tenant, refreshed after `ttl_s`."""

    def __init__(
        self,
        session_factory: Callable[[], AsyncSession],
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._session_factory, self._ttl_s, self._clock = session_factory, ttl_s, clock
        self._cache: dict[UUID, tuple[float, dict[str, int]]] = {}

    async def get(self, tenant_id: UUID) -> dict[str, int]:
        """The tenant's limits (plan merged with overrides)."""
        hit = self._cache.get(tenant_id)
        now = self._clock()
        if hit and hit[0] > now:
            return hit[1]
        async with self._session_factory() as session:
            limits = await limits_of(session, tenant_id)
        self._cache[tenant_id] = (now + self._ttl_s, limits)
        return limits
