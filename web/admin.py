"""The operator's admin UI: tenants, the engines' placement map, and the audit log."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.serving.live import LivePlacement
from loraplex.web import reads
from loraplex.web.replica import fmt_ms, replica_stats
from loraplex.web.session import Viewer, require_operator


class AdminController(Controller):
    """`/admin` for operators."""

    path = "/admin"

    @get("/", name="admin.overview")
    async def overview(
        self, request: Request[Any, Any, Any], viewer: Viewer, db_session: AsyncSession
    ) -> Template:
        """Live figures, traffic, where every adapter version sits on which engine, tenants,
        recent changes."""
        require_operator(viewer)
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
