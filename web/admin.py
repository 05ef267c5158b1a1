"""The operator's admin UI: the live dashboard, tenants, and the audit log.

The dashboard's live sections are fragments of their own (`/admin/live/...`) that htmx polls
every few seconds and swaps in place, so its figures, slots and placement map move without a
reload.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from litestar import Controller, Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.control.quotas import QUOTA_FIELDS
from loraplex.control.tenants.schemas import TenantUpdate
from loraplex.control.tenants.service import TenantService
from loraplex.db.models import TenantStatus
from loraplex.errors import InvalidInput
from loraplex.finetune.ids import JOB, public
from loraplex.web import admin_reads, reads
from loraplex.web.audit import TYPED_FILTERS, audit_page
from loraplex.web.forms import convert, number
from loraplex.web.paging import PageAsked, page_number
from loraplex.web.replica import fmt_ms, replica_stats, tenant_refusals
from loraplex.web.session import Viewer

RECENT_CHANGES = 10  # the dashboard's audit excerpt; the audit page has the rest


class AdminController(Controller):
    """`/admin` for operators."""

    path = "/admin"
    dependencies = providers.create_service_dependencies(TenantService, key="tenants")

    @get("/", name="admin.overview")
    async def overview(
        self, request: Request[Any, Any, Any], operator: Viewer, db_session: AsyncSession
    ) -> Template:
        """Live figures, traffic, where every adapter version sits on which engine, tenants,
        recent changes."""
        context = {
            **_figures(),
            **await _traffic(db_session),
            **await _placement(request, db_session),
            **await _tenants(db_session),
            "audit": await reads.recent_audit(db_session, limit=RECENT_CHANGES),
        }
        return Template("admin/overview.html", context=context)

    @get("/live/figures", name="admin.live.figures")
    async def live_figures(self, operator: Viewer) -> Template:
        """The dashboard's figures of this API process, polled."""
        return Template("admin/_figures.html", context=_figures())

    @get("/live/traffic", name="admin.live.traffic")
    async def live_traffic(self, operator: Viewer, db_session: AsyncSession) -> Template:
        """The dashboard's last hour of traffic, polled."""
        return Template("admin/_traffic.html", context=await _traffic(db_session))

    @get("/live/placement", name="admin.live.placement")
    async def live_placement(
        self, request: Request[Any, Any, Any], operator: Viewer, db_session: AsyncSession
    ) -> Template:
        """The dashboard's engines (slots used, queues) and placement map, polled."""
        context = await _placement(request, db_session)
        return Template("admin/_placement.html", context=context)

    @get("/live/tenants", name="admin.live.tenants")
    async def live_tenants(self, operator: Viewer, db_session: AsyncSession) -> Template:
        """The dashboard's tenant counts and newest tenants, polled."""
        return Template("admin/_tenant_summary.html", context=await _tenants(db_session))

    @get("/tenants", name="admin.tenants")
    async def tenants(
        self,
        operator: Viewer,
        db_session: AsyncSession,
        q: str = "",
        page_asked: PageAsked = "",
    ) -> Template:
        """Every tenant, searched by name or slug and paged; bad paging is a 400 in the page."""
        context: dict[str, Any] = {"q": q}
        try:
            context["listing"] = await admin_reads.tenant_list(
                db_session, q, page_number(page_asked)
            )
        except InvalidInput as exc:
            return _refused("admin/tenants.html", context, exc)
        return Template("admin/tenants.html", context=context)

    @get("/audit", name="admin.audit", dependencies=TYPED_FILTERS)
    async def audit(
        self,
        operator: Viewer,
        db_session: AsyncSession,
        typed: dict[str, str],
        tenant: str = "",
        page_asked: PageAsked = "",
    ) -> Template:
        """The audit log filtered by tenant, actor, action and UTC dates, paged, newest first;
        a filter that cannot be read is a 400 in the page, the form kept as typed."""
        typed = {"tenant": tenant, **typed}
        return await audit_page(db_session, "admin/audit.html", typed, page_asked)

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

    @post("/tenants/{tenant_id:uuid}/quota", status_code=200)
    async def set_quota(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        operator: Viewer,
        tenants: TenantService,
        db_session: AsyncSession,
    ) -> Template:
        """Replace the overrides: a filled field overrides the plan, an empty one does not."""
        overrides = {name: number(form, name) for name in QUOTA_FIELDS}
        await tenants.set_overrides(
            tenant_id, {k: v for k, v in overrides.items() if v is not None}, operator.actor
        )
        return await _tenant(db_session, tenant_id, saved="Quota saved.")

    @post("/tenants/{tenant_id:uuid}/plan", status_code=200)
    async def set_plan(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        operator: Viewer,
        tenants: TenantService,
        db_session: AsyncSession,
    ) -> Template:
        """Move the tenant to another plan; its overrides stay."""
        data = convert({"plan": str(form.get("plan", ""))}, TenantUpdate)
        await tenants.update_tenant(tenant_id, data, operator.actor)
        return await _tenant(db_session, tenant_id, saved=f"Tenant is now on plan {data.plan}.")

    @post("/tenants/{tenant_id:uuid}/status", status_code=200)
    async def set_status(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        operator: Viewer,
        tenants: TenantService,
        db_session: AsyncSession,
    ) -> Template:
        """Suspend (its keys stop working) or resume a tenant."""
        wanted = form.get("status")
        if wanted not in (TenantStatus.ACTIVE, TenantStatus.SUSPENDED):
            raise InvalidInput("status must be 'active' or 'suspended'", param="status")
        await tenants.set_status(tenant_id, TenantStatus(wanted), operator.actor)
        return await _tenant(db_session, tenant_id, saved=f"Tenant is now {wanted}.")


async def _tenant(session: AsyncSession, tenant_id: UUID, saved: str = "") -> Template:
    tenants = TenantService(session=session)
    context = {
        "tenant": await tenants.visible(tenant_id),
        "quota": await tenants.quota(tenant_id),
        "fields": QUOTA_FIELDS,
        "plans": [plan.name for plan, _ in await reads.plans_with_tenants(session)],
        "saved": saved,
        "refusals": tenant_refusals(tenant_id),
    }
    return Template("admin/tenant.html", context=context)


def _refused(template: str, context: dict[str, Any], exc: InvalidInput) -> Template:
    """The page again with the reason its query was refused, as a 400."""
    return Template(template, context={**context, "refused": exc.detail}, status_code=400)


def _figures() -> dict[str, Any]:
    return {"stats": replica_stats(), "fmt_ms": fmt_ms}


async def _traffic(session: AsyncSession) -> dict[str, Any]:
    return {"traffic": await reads.traffic(session)}


async def _tenants(session: AsyncSession) -> dict[str, Any]:
    return {"summary": await admin_reads.tenant_summary(session)}


async def _placement(request: Request[Any, Any, Any], session: AsyncSession) -> dict[str, Any]:
    """This process's placement map (None where it places nothing), hottest versions first,
    each named by tenant, adapter and version where the database knows it."""
    placement = services_of(request.app).placement
    if placement is None:
        return {"placement": None}
    snapshot = placement.snapshot()
    shown = snapshot["versions"][: admin_reads.PLACED_VERSIONS]
    labels = await admin_reads.version_labels(session, [v["version_id"] for v in shown])
    return {
        "placement": snapshot,
        "versions": shown,
        "hidden_versions": len(snapshot["versions"]) - len(shown),
        "labels": labels,
    }
