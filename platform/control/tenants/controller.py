"""HTTP routes for tenants, their quotas, and plans."""

from __future__ import annotations

from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, delete, get, patch, post, put

from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.tenants.schemas import (
    PlanIn,
    PlanOut,
    QuotaOut,
    QuotaUpdate,
    TenantCreate,
    TenantOut,
    TenantUpdate,
)
from loraplex.control.tenants.service import PlanService, TenantService
from loraplex.db.models import Tenant, TenantStatus

TENANT = "/api/v1/tenants/{tenant_id:uuid}"


class TenantController(Controller):
    """Tenants: operators manage them; a tenant key may read its own."""

    tags = ["tenants"]
    dependencies = providers.create_service_dependencies(TenantService, key="tenants")

    @post("/api/v1/tenants", operation_id="CreateTenant", opt=access.OPERATOR)
    async def create_tenant(
        self, data: TenantCreate, tenants: TenantService, principal: Principal
    ) -> TenantOut:
        """Create a tenant."""
        return tenants.to_out(await tenants.create_tenant(data, principal.actor))

    @get("/api/v1/tenants", operation_id="ListTenants", opt=access.OPERATOR)
    async def list_tenants(
        self, tenants: TenantService, page: LimitOffset
    ) -> OffsetPagination[TenantOut]:
        """Tenants that are not deleted, oldest first."""
        items, total = await tenants.get_many_and_count(
            page, OrderBy("created_at", "asc"), Tenant.status != TenantStatus.DELETED
        )
        return OffsetPagination([tenants.to_out(t) for t in items], page.limit, page.offset, total)

    @get(TENANT, operation_id="GetTenant", opt=access.tenant())
    async def get_tenant(self, tenant_id: UUID, tenants: TenantService) -> TenantOut:
        """One tenant."""
        return tenants.to_out(await tenants.visible(tenant_id))

    @patch(TENANT, operation_id="UpdateTenant", opt=access.OPERATOR)
    async def update_tenant(
        self, tenant_id: UUID, data: TenantUpdate, tenants: TenantService, principal: Principal
    ) -> TenantOut:
        """Rename a tenant or change its plan."""
        return tenants.to_out(await tenants.update_tenant(tenant_id, data, principal.actor))

    @post(
        f"{TENANT}/suspend",
        operation_id="SuspendTenant",
        opt=access.OPERATOR,
        status_code=200,
    )
    async def suspend_tenant(
        self, tenant_id: UUID, tenants: TenantService, principal: Principal
    ) -> TenantOut:
        """Suspend a tenant: its keys stop working until it is resumed."""
        return tenants.to_out(
            await tenants.set_status(tenant_id, TenantStatus.SUSPENDED, principal.actor)
        )

    @post(
        f"{TENANT}/resume",
        operation_id="ResumeTenant",
        opt=access.OPERATOR,
        status_code=200,
    )
    async def resume_tenant(
        self, tenant_id: UUID, tenants: TenantService, principal: Principal
    ) -> TenantOut:
        """Reactivate a suspended tenant."""
        return tenants.to_out(
            await tenants.set_status(tenant_id, TenantStatus.ACTIVE, principal.actor)
        )

    @delete(TENANT, operation_id="DeleteTenant", opt=access.OPERATOR)
    async def delete_tenant(
        self, tenant_id: UUID, tenants: TenantService, principal: Principal
    ) -> None:
        """Delete a tenant (its keys stop working; the row stays for the audit trail)."""
        await tenants.set_status(tenant_id, TenantStatus.DELETED, principal.actor)

    @get(f"{TENANT}/quota", operation_id="GetTenantQuota", opt=access.tenant())
    async def get_quota(self, tenant_id: UUID, tenants: TenantService) -> QuotaOut:
        """The tenant's limits."""
        return await tenants.quota(tenant_id)

    @put(
        f"{TENANT}/quota",
        operation_id="SetTenantQuota",
        opt=access.OPERATOR,
    )
    async def set_quota(
        self, tenant_id: UUID, data: QuotaUpdate, tenants: TenantService, principal: Principal
    ) -> QuotaOut:
        """Replace the tenant's quota overrides."""
        return await tenants.set_overrides(tenant_id, data.overrides, principal.actor)


class PlanController(Controller):
    """Plans, managed by operators."""

    tags = ["plans"]
    dependencies = providers.create_service_dependencies(PlanService, key="plans")

    @get("/api/v1/plans", operation_id="ListPlans", opt=access.OPERATOR)
    async def list_plans(self, plans: PlanService, page: LimitOffset) -> OffsetPagination[PlanOut]:
        """Every plan."""
        items, total = await plans.get_many_and_count(page, OrderBy("name", "asc"))
        return plans.to_schema(items, total, filters=[page], schema_type=PlanOut)

    @put(
        "/api/v1/plans",
        operation_id="UpsertPlan",
        opt=access.OPERATOR,
    )
    async def upsert_plan(self, data: PlanIn, plans: PlanService, principal: Principal) -> PlanOut:
        """Create a plan or replace it by name."""
        return plans.to_schema(await plans.upsert(data, principal.actor), schema_type=PlanOut)
