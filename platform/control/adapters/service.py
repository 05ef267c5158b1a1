"""Adapters: named per tenant, each on one base model."""

from __future__ import annotations

from uuid import UUID

from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from sqlalchemy import func, select

from loraplex.control.adapters.schemas import AdapterCreate, AdapterOut
from loraplex.control.audit.service import record
from loraplex.control.tenants.service import limits_of, lock_tenant
from loraplex.db.models import Adapter, BaseModel
from loraplex.errors import Conflict, InvalidInput, NotFound, QuotaExceeded


class AdapterService(SQLAlchemyAsyncRepositoryService[Adapter]):
    """A tenant's adapters; every lookup is scoped by tenant."""

    class Repo(SQLAlchemyAsyncRepository[Adapter]):
        """Adapters."""

        model_type = Adapter

    repository_type = Repo

    async def named(self, tenant_id: UUID, name: str) -> Adapter:
        """The tenant's adapter called `name`, or 404 (also for other tenants' adapters)."""
        adapter = await self.get_one_or_none(tenant_id=tenant_id, name=name)
        if adapter is None:
            raise NotFound(f"adapter '{name}' not found")
        return adapter

    async def create_adapter(self, tenant_id: UUID, data: AdapterCreate, actor: str) -> Adapter:
        """Create an adapter, within the plan's adapter count."""
        session = self.repository.session
        base = (
            await session.execute(select(BaseModel).where(BaseModel.name == data.base_model))
        ).scalar_one_or_none()
        if base is None:
            raise InvalidInput(f"unknown base model '{data.base_model}'", param="base_model")
        if await self.exists(tenant_id=tenant_id, name=data.name):
            raise Conflict(f"adapter '{data.name}' already exists", param="name")
        limit = (await limits_of(session, tenant_id)).get("max_adapters")
        await lock_tenant(session, tenant_id)  # two creates at once must not both fit
        owned = await session.scalar(
            select(func.count()).select_from(Adapter).where(Adapter.tenant_id == tenant_id)
        )
        if limit is not None and (owned or 0) >= limit:
            raise QuotaExceeded(
                f"the plan allows {limit} adapters and the tenant has {owned}", param="name"
            )
        adapter = await self.create(
            Adapter(
                tenant_id=tenant_id,
                name=data.name,
                base_model_id=base.id,
                base_model=base,
                description=data.description,
            )
        )
        record(
            session,
            actor,
            "adapter.create",
            adapter,
            tenant_id=tenant_id,
            name=data.name,
            base_model=base.name,
        )
        return adapter

    @staticmethod
    def to_out(adapter: Adapter) -> AdapterOut:
        """The API view of an adapter."""
        return AdapterOut(
            id=adapter.id,
            name=adapter.name,
            base_model=adapter.base_model.name,
            description=adapter.description,
            created_at=adapter.created_at,
        )
