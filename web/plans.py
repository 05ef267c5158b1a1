"""Operators edit plans (named bundles of quotas) and create new ones.

A plan's limits apply to every tenant on it, less the tenant's own overrides; the change
reaches this replica's gateway at once and other replicas within their cache time.
"""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.datastructures import FormMultiDict
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.quotas import QUOTA_FIELDS
from loraplex.control.tenants.schemas import PlanIn
from loraplex.control.tenants.service import PlanService
from loraplex.errors import Conflict
from loraplex.web import reads
from loraplex.web.forms import convert, number
from loraplex.web.session import Viewer


class PlanPages(Controller):
    """`/admin/plans`."""

    path = "/admin/plans"

    @get("/", name="admin.plans")
    async def plans_page(self, operator: Viewer, db_session: AsyncSession) -> Template:
        """Every plan with its limits and how many tenants are on it, each as a form."""
        return await _plans(db_session, page=True)

    @post("/", status_code=200)
    async def save_plan(
        self, form: FormMultiDict, operator: Viewer, db_session: AsyncSession
    ) -> Template:
        """Replace a plan's description and limits (an empty field: no limit), or create one
        (`new=true`: a name already taken is refused, never overwritten)."""
        limits = {name: number(form, name) for name in QUOTA_FIELDS}
        fields = {
            "name": str(form.get("name", "")).strip(),
            "description": str(form.get("description", "")).strip(),
            "limits": {k: v for k, v in limits.items() if v is not None},
        }
        data = convert(fields, PlanIn)
        plans = PlanService(session=db_session)
        if form.get("new") == "true" and await plans.exists(name=data.name):
            raise Conflict(f"plan '{data.name}' already exists; edit it above", param="name")
        plan = await plans.upsert(data, operator.actor)
        return await _plans(db_session, saved=f"Plan {plan.name} saved.")


async def _plans(session: AsyncSession, *, page: bool = False, saved: str = "") -> Template:
    plans = await reads.plans_with_tenants(session)
    context = {"plans": plans, "fields": QUOTA_FIELDS, "saved": saved}
    name = "admin/plans.html" if page else "admin/_plans.html"
    return Template(name, context=context)
