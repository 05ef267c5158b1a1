"""A short cache of each tenant's limits, so the hot path does not query them per request."""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.quotas import Quotas
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
        # Stale-while-revalidate: a busy tenant's requests never wait for the reload.
        self._cache: TtlCache[UUID, Quotas] = TtlCache(ttl_s, clock, stale_s=60.0)

    async def get(self, tenant_id: UUID) -> Quotas:
        """The tenant's limits (plan merged with overrides), typed."""
        return await self._cache.get(tenant_id, lambda: self._load(tenant_id))

    def forget_all(self) -> None:
        """Drop every cached tenant's limits (a quota or plan changed on this replica)."""
        self._cache.clear()

    async def _load(self, tenant_id: UUID) -> Quotas:
        async with self._session_factory() as session:
            return Quotas.of(await limits_of(session, tenant_id))
