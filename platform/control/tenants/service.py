"""Tenants, plans and quota overrides: the rules for changing them."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.changes import Change, announce
from loraplex.control.audit.service import record
from loraplex.control.quotas import check_limits, effective_limits
from loraplex.control.tenants.schemas import PlanIn, QuotaOut, TenantCreate, TenantOut, TenantUpdate
from loraplex.db.models import Plan, QuotaOverride, Tenant, TenantStatus
from loraplex.errors import Conflict, InvalidInput, NotFound
from loraplex.finetune.service import JobService


async def limits_of(session: AsyncSession, tenant_id: UUID) -> dict[str, int]:
    """The limits in force for a tenant (plan merged with overrides); `NotFound` naming the
    tenant when there is none (an operator may name any id in a path)."""
    tenant = await session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound(f"no tenant {tenant_id}", param="tenant_id")
    return effective_limits(tenant.plan.limits, tenant.override.limits if tenant.override else None)


async def lock_tenant(session: AsyncSession, tenant_id: UUID) -> None:
    """Hold the tenant's row until this transaction ends, so a quota counted after this call
    is not raced by another request of the tenant counting at the same time (PostgreSQL's
    FOR UPDATE makes the second wait for the first's commit; SQLite serialises writers)."""
    await session.execute(select(Tenant.id).where(Tenant.id == tenant_id).with_for_update())


class PlanService(SQLAlchemyAsyncRepositoryService[Plan]):
    """Plans: named bundles of quotas."""

    class Repo(SQLAlchemyAsyncRepository[Plan]):
        """Plans."""

        model_type = Plan

    repository_type = Repo

    async def by_name(self, name: str) -> Plan:
        """The plan called `name`, or a 400 naming it."""
        plan = await self.get_one_or_none(name=name)
        if plan is None:
            raise InvalidInput(f"unknown plan '{name}'", param="plan")
        return plan

    async def upsert(self, data: PlanIn, actor: str) -> Plan:
        """Create a plan or replace its description and limits."""
        limits = check_limits(data.limits)
        plan = await self.get_one_or_none(name=data.name)
        if plan is None:
            plan = await self.create(
                Plan(name=data.name, description=data.description, limits=limits)
            )
        else:
            plan.description, plan.limits = data.description, limits
            plan = await self.update(plan)
        record(self.repository.session, actor, "plan.upsert", plan, name=plan.name, limits=limits)
        announce(self.repository.session, Change.TENANT_LIMITS)
        return plan


class TenantService(SQLAlchemyAsyncRepositoryService[Tenant]):
    """Tenants and their quotas."""

    class Repo(SQLAlchemyAsyncRepository[Tenant]):
        """Tenants that are not deleted."""

        model_type = Tenant

    repository_type = Repo

    async def visible(self, tenant_id: UUID) -> Tenant:
        """A tenant that exists and is not deleted, or 404."""
        tenant = await self.get_one_or_none(id=tenant_id)
        if tenant is None or tenant.status == TenantStatus.DELETED:
            raise NotFound("tenant not found")
        return tenant

    async def create_tenant(self, data: TenantCreate, actor: str) -> Tenant:
        """Create a tenant on a plan; the slug must be free."""
        if await self.exists(slug=data.slug):
            raise Conflict(f"tenant slug '{data.slug}' is already taken", param="slug")
        plan = await PlanService(session=self.repository.session).by_name(data.plan)
        tenant = await self.create(
            Tenant(slug=data.slug, name=data.name, plan_id=plan.id, plan=plan)
        )
        record(
            self.repository.session,
            actor,
            "tenant.create",
            tenant,
            tenant_id=tenant.id,
            slug=tenant.slug,
            plan=plan.name,
        )
        return tenant

    async def update_tenant(self, tenant_id: UUID, data: TenantUpdate, actor: str) -> Tenant:
        """Rename a tenant or move it to another plan."""
        tenant = await self.visible(tenant_id)
        changes: dict[str, Any] = {}
        if data.name is not None:
            tenant.name = changes["name"] = data.name
        if data.plan is not None:
            plan = await PlanService(session=self.repository.session).by_name(data.plan)
            tenant.plan_id, tenant.plan = plan.id, plan
            changes["plan"] = plan.name
        tenant = await self.update(tenant)
        record(
            self.repository.session, actor, "tenant.update", tenant, tenant_id=tenant.id, **changes
        )
        if "plan" in changes:
            announce(self.repository.session, Change.TENANT_LIMITS, str(tenant.id))
        return tenant

    async def set_status(self, tenant_id: UUID, status: TenantStatus, actor: str) -> Tenant:
        """Suspend, reactivate or delete (soft: keeps the row for the audit trail); a tenant
        no longer active has its fine-tuning jobs cancelled in the same transaction."""
        tenant = await self.visible(tenant_id)
        tenant.status = status
        tenant = await self.update(tenant)
        record(self.repository.session, actor, f"tenant.{status}", tenant, tenant_id=tenant.id)
        if status != TenantStatus.ACTIVE:  # a suspended tenant's jobs must not keep training
            await JobService(self.repository.session).cancel_all(
                tenant.id, actor, f"the tenant was {status}"
            )
        announce(self.repository.session, Change.TENANT_ACCESS, str(tenant.id))
        return tenant

    async def quota(self, tenant_id: UUID) -> QuotaOut:
        """The tenant's limits: plan, overrides and effective."""
        tenant = await self.visible(tenant_id)
        overrides = dict(tenant.override.limits) if tenant.override else {}
        return QuotaOut(
            tenant_id=tenant.id,
            plan=tenant.plan.name,
            plan_limits=dict(tenant.plan.limits),
            overrides=overrides,
            effective=effective_limits(tenant.plan.limits, overrides),
        )

    async def set_overrides(
        self, tenant_id: UUID, overrides: dict[str, int], actor: str
    ) -> QuotaOut:
        """Replace the tenant's quota overrides."""
        limits = check_limits(overrides, param="overrides")
        tenant = await self.visible(tenant_id)
        session = self.repository.session
        row = (
            await session.execute(select(QuotaOverride).where(QuotaOverride.tenant_id == tenant.id))
        ).scalar_one_or_none()
        if row is None:
            session.add(QuotaOverride(tenant_id=tenant.id, limits=limits))
        else:
            row.limits = limits
        await session.flush()
        await session.refresh(tenant)
        record(session, actor, "tenant.quota", tenant, tenant_id=tenant.id, overrides=limits)
        announce(session, Change.TENANT_LIMITS, str(tenant.id))
        return await self.quota(tenant_id)

    @staticmethod
    def to_out(tenant: Tenant) -> TenantOut:
        """The API view of a tenant."""
        return TenantOut(
            id=tenant.id,
            slug=tenant.slug,
            name=tenant.name,
            status=tenant.status,
            plan=tenant.plan.name,
            created_at=tenant.created_at,
            updated_at=tenant.updated_at,
        )
