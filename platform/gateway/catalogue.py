"""What a tenant may put in `model`: the catalogue behind `/v1/models` and the playground.

One query, whatever the number of adapters: base models, then each of the tenant's adapters
followed by its aliases and its ready versions (`name`, `name@alias`, `name@vN`), the same
strings `ModelResolver` resolves.
"""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import String, cast, literal, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, BaseModel, VersionStatus

_BASE, _ADAPTER = 0, 1  # groups: base models first, then adapters
_NAME, _ALIAS, _VERSION = 0, 1, 2  # within an adapter: itself, its aliases, its versions


async def model_ids(session: AsyncSession, tenant_id: UUID) -> list[str]:
    """Every model id the tenant may use, in the order `/v1/models` lists them."""
    base = select(
        literal(_BASE).label("grp"),
        BaseModel.name.label("owner"),
        literal(_NAME).label("kind"),
        literal(0).label("rank"),
        BaseModel.name.label("id"),
    )
    adapters = select(
        literal(_ADAPTER),
        Adapter.name,
        literal(_NAME),
        literal(0),
        Adapter.name,
    ).where(Adapter.tenant_id == tenant_id)
    aliases = (
        select(
            literal(_ADAPTER),
            Adapter.name,
            literal(_ALIAS),
            literal(0),
            Adapter.name + "@" + AdapterAlias.name,
        )
        .join(AdapterAlias, AdapterAlias.adapter_id == Adapter.id)
        .where(Adapter.tenant_id == tenant_id)
    )
    versions = (
        select(
            literal(_ADAPTER),
            Adapter.name,
            literal(_VERSION),
            AdapterVersion.number,
            Adapter.name + "@v" + cast(AdapterVersion.number, String),
        )
        .join(AdapterVersion, AdapterVersion.adapter_id == Adapter.id)
        .where(Adapter.tenant_id == tenant_id, AdapterVersion.status == VersionStatus.READY)
    )
    every = union_all(base, adapters, aliases, versions).subquery()
    ordered = select(every.c.id).order_by(
        every.c.grp, every.c.owner, every.c.kind, every.c.rank, every.c.id
    )
    return list((await session.execute(ordered)).scalars())
