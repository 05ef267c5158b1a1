"""A short cache of each tenant's limits, so the hot path does not query them per request."""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.tenants.service import limits_of
from loraplex.ttl_cache import TtlCache


class TenantLimits:
    """Effective limits per tenant, refreshed after `ttl_s`."""

    def __init__(
        self,
        session_factory: Callable[[], AsyncSession],
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._session_factory = session_factory
        self._cache: TtlCache[UUID, dict[str, int]] = TtlCache(ttl_s, clock)

    async def get(self, tenant_id: UUID) -> dict[str, int]:
        """The tenant's limits (plan merged with overrides)."""
        return await self._cache.get(tenant_id, lambda: self._load(tenant_id))

    async def _load(self, tenant_id: UUID) -> dict[str, int]:
        async with self._session_factory() as session:
            return await limits_of(session, tenant_id)
