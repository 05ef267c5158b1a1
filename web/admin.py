"""The operator's admin UI: tenants, the engines' placement map, and the audit log."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Controller, Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.quotas import QUOTA_FIELDS
from loraplex.control.tenants.controller import access_changed, limits_changed
from loraplex.control.tenants.schemas import TenantUpdate
from loraplex.control.tenants.service import TenantService
from loraplex.db.models import TenantStatus
from loraplex.errors import InvalidInput
from loraplex.finetune.ids import JOB, public
from loraplex.serving.live import LivePlacement
from loraplex.web import reads
from loraplex.web.forms import convert, number
from loraplex.web.replica import fmt_ms, replica_stats
from loraplex.web.session import Viewer


class AdminController(Controller):
    """`/admin` for operators."""

    path = "/admin"

    @get("/", name="admin.overview")
    async def overview(
        self, request: Request[Any, Any, Any], operator: Viewer, db_session: AsyncSession
    ) -> Template:
        """Live figures, traffic, where every adapter version sits on which engine, tenants,
        recent changes."""
        placement = request.app.state.get("placement")
        snapshot = placement.snapshot() if isinstance(placement, LivePlacement) else None
        return Template(
            "admin/overview.html",
            context={
                "stats": replica_stats(),
                "fmt_ms": fmt_ms,
                "traffic": await reads.traffic(db_session),
                "tenants": await reads.tenants(db_session),
                "placement": snapshot,
                "audit": await reads.recent_audit(db_session),
            },
        )

    @get("/adapters", name="admin.adapters")
    async def adapters(self, operator: Viewer, db_session: AsyncSession) -> Template:
        """Every tenant's adapters: versions, ready ones, bytes stored."""
        rows = await reads.all_adapters(db_session)
        return Template("admin/adapters.html", context={"rows": rows})

    @get("/jobs", name="admin.jobs")
    async def jobs(self, operator: Viewer, db_session: AsyncSession) -> Template:
        """The newest fine-tuning jobs of every tenant."""
        jobs = [(slug, public(JOB, job.id), job) for slug, job in await reads.all_jobs(db_session)]
        return Template("admin/jobs.html", context={"jobs": jobs})

    @get("/tenants/{tenant_id:uuid}", name="admin.tenant")
    async def tenant_page(
        self, tenant_id: UUID, operator: Viewer, db_session: AsyncSession
    ) -> Template:
        """One tenant: status, plan, and every limit with its override."""
        return await _tenant(db_session, tenant_id)

    @post("/tenants/{tenant_id:uuid}/quota", status_code=200, after_response=limits_changed)
    async def set_quota(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        operator: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Replace the overrides: a filled field overrides the plan, an empty one does not."""
        overrides = {name: number(form, name) for name in QUOTA_FIELDS}
        await TenantService(session=db_session).set_overrides(
            tenant_id, {k: v for k, v in overrides.items() if v is not None}, operator.actor
        )
        return await _tenant(db_session, tenant_id, saved="Quota saved.")

    @post("/tenants/{tenant_id:uuid}/plan", status_code=200, after_response=limits_changed)
    async def set_plan(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        operator: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Move the tenant to another plan; its overrides stay."""
        data = convert({"plan": str(form.get("plan", ""))}, TenantUpdate)
        await TenantService(session=db_session).update_tenant(tenant_id, data, operator.actor)
        return await _tenant(db_session, tenant_id, saved=f"Tenant is now on plan {data.plan}.")

    @post("/tenants/{tenant_id:uuid}/status", status_code=200, after_response=access_changed)
    async def set_status(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        operator: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Suspend (its keys stop working) or resume a tenant."""
        wanted = form.get("status")
        if wanted not in (TenantStatus.ACTIVE, TenantStatus.SUSPENDED):
            raise InvalidInput("status must be 'active' or 'suspended'", param="status")
        await TenantService(session=db_session).set_status(
            tenant_id, TenantStatus(wanted), operator.actor
        )
        return await _tenant(db_session, tenant_id, saved=f"Tenant is now {wanted}.")


async def _tenant(session: AsyncSession, tenant_id: UUID, saved: str = "") -> Template:
    tenants = TenantService(session=session)
    context = {
        "tenant": await tenants.visible(tenant_id),
        "quota": await tenants.quota(tenant_id),
        "fields": QUOTA_FIELDS,
        "plans": [plan.name for plan, _ in await reads.plans_with_tenants(session)],
        "saved": saved,
    }
    return Template("admin/tenant.html", context=context)
