"""What live placement knows about adapter versions and tenants, read from the database.

Versions are immutable, so their facts are cached for the life of the process; a tenant's
plan comes through a short-lived limits cache (the gateway's `TenantLimits.get`). The
versions pinned through aliases change whenever an alias moves, so they are read afresh.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from sqlalchemy import select

from loraplex.db.models import AdapterAlias
from loraplex.db.models import AdapterVersion as VersionRow
from loraplex.serving.policy import AdapterVersion, TenantPlan

SessionFactory = Callable[[], Any]  # `async with factory() as session`
LimitsOf = Callable[[UUID], Awaitable[Mapping[str, int]]]


@dataclass(frozen=True, slots=True)
class VersionFacts:
    """One adapter version as placement and the loaders need it."""

    version_id: UUID
    tenant_id: UUID
    rank: int
    size_bytes: int
    storage_key: str
    files: Mapping[str, str] = field(default_factory=dict)  # file name -> sha256

    def for_policy(self) -> AdapterVersion:
        """The policy core's view: string ids, rank and size."""
        return AdapterVersion(str(self.version_id), str(self.tenant_id), self.rank, self.size_bytes)


class FactsSource(Protocol):
    """Where version facts and tenant plans come from."""

    async def version(self, version_id: UUID) -> VersionFacts | None:
        """The version's facts; None for a version that does not exist."""
        ...

    async def plan(self, tenant_id: UUID) -> TenantPlan:
        """What the tenant's plan says about serving."""
        ...

    async def pinned_versions(self) -> frozenset[UUID]:
        """Versions pinned aliases point at now: each one's target and canary."""
        ...


def plan_from_limits(limits: Mapping[str, int]) -> TenantPlan:
    """A policy plan from effective quota limits (a missing limit is no limit).

    The plan's admission `priority` (0 free, 1 pro, 2 enterprise) doubles as the weight in
    dispatch fair share, so a higher class gets proportionally more of a contended engine.
    """
    rate = limits.get("cold_loads_per_minute")
    return TenantPlan(
        weight=1.0 + max(0, limits.get("priority", 0)),
        cold_loads_per_minute=float(rate) if rate is not None else None,
        max_pins=limits.get("pinned_adapters", 0),
    )


class DbFacts:
    """Facts from the `adapter_versions` table, plans from the tenant-limits cache."""

    def __init__(self, session_factory: SessionFactory, limits_of: LimitsOf) -> None:
        self._session_factory = session_factory
        self._limits_of = limits_of
        self._versions: dict[UUID, VersionFacts] = {}

    async def version(self, version_id: UUID) -> VersionFacts | None:
        """The version's facts, read once."""
        known = self._versions.get(version_id)
        if known is not None:
            return known
        async with self._session_factory() as session:
            row = (
                await session.execute(select(VersionRow).where(VersionRow.id == version_id))
            ).scalar_one_or_none()
        if row is None:
            return None
        files: dict[str, Any] = (row.details or {}).get("files", {})
        facts = VersionFacts(
            version_id=row.id,
            tenant_id=row.tenant_id,
            rank=row.rank or 0,
            size_bytes=row.size_bytes or 0,
            storage_key=row.storage_key,
            files={name: str(info.get("sha256", "")) for name, info in sorted(files.items())},
        )
        self._versions[version_id] = facts
        return facts

    async def plan(self, tenant_id: UUID) -> TenantPlan:
        """The tenant's plan, from its effective limits."""
        return plan_from_limits(await self._limits_of(tenant_id))

    async def pinned_versions(self) -> frozenset[UUID]:
        """Targets and canaries of every pinned alias (the plan was checked when pinning)."""
        query = select(AdapterAlias.version_id, AdapterAlias.canary_version_id).where(
            AdapterAlias.pinned
        )
        async with self._session_factory() as session:
            rows = (await session.execute(query)).all()
        return frozenset(v for row in rows for v in row if v is not None)
