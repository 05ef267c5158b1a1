"""Operators register, watch and retire inference engines in the admin UI.

The same service as `/api/v1/engines`: a registered engine is probed by this replica's health
poller at once and takes requests once it answers; other replicas pick it up from the
database on their next sync. The page's table polls `/admin/engines/live`, so slots, queues
and in-flight counts move without a reload; below it, the adapters waiting on an engine (for
a load or a GPU slot) and the busiest adapters' TTFT and loads, from this process's placement
(serving/live/adapter_figures.py: per-adapter figures are kept here, not as metric labels).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Controller, Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.control.engines.schemas import EngineCreate
from loraplex.control.engines.service import EngineService
from loraplex.db.models import EngineKind
from loraplex.serving.probes.store import failing_probes
from loraplex.web import admin_reads, reads
from loraplex.web.forms import convert, number
from loraplex.web.session import Viewer

FIELDS = ("name", "url", "kind", "base_model", "agent_url")
SIZES = ("max_lora_rank", "gpu_slots", "host_slots")
PAGE = "admin/engines.html"
CARD = "admin/_engines.html"  # what the register and remove forms swap in
TABLE = "admin/_engines_live.html"  # what the page polls
BUSIEST_ADAPTERS = 20  # the adapters table lists this many, most requests first


class EnginePages(Controller):
    """`/admin/engines`."""

    path = "/admin/engines"

    @get("/", name="admin.engines")
    async def engines_page(
        self, request: Request[Any, Any, Any], operator: Viewer, db_session: AsyncSession
    ) -> Template:
        """Every engine with its health as this replica sees it, and a form for one more."""
        return await _engines(request, db_session, PAGE)

    @get("/live", name="admin.engines.live")
    async def live_table(
        self, request: Request[Any, Any, Any], operator: Viewer, db_session: AsyncSession
    ) -> Template:
        """The engines table alone, polled by the page: slots used, queues, in flight."""
        return await _engines(request, db_session, TABLE)

    @post("/", status_code=201)
    async def register(
        self,
        request: Request[Any, Any, Any],
        form: FormMultiDict,
        operator: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Register an engine; it is probed at once and routed to once it answers."""
        fields: dict[str, Any] = {k: str(form.get(k, "")).strip() for k in FIELDS}
        sizes = {k: number(form, k) for k in SIZES}
        data = convert(
            {**fields, **{k: v for k, v in sizes.items() if v is not None}}, EngineCreate
        )
        engine = await EngineService(session=db_session).register(
            data, operator.actor, services_of(request.app).registry
        )
        saved = f"Engine {engine.name} registered; it takes requests once it answers."
        return await _engines(request, db_session, CARD, saved=saved, status=201)

    @post("/{engine_id:uuid}/remove", status_code=200)
    async def remove(
        self,
        request: Request[Any, Any, Any],
        engine_id: UUID,
        operator: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Retire a registered engine; requests in flight on it end with an error event."""
        await EngineService(session=db_session).deregister(
            engine_id, operator.actor, services_of(request.app).registry
        )
        return await _engines(request, db_session, CARD, saved="Engine removed.")


async def _engines(
    request: Request[Any, Any, Any],
    session: AsyncSession,
    template: str,
    *,
    saved: str = "",
    status: int = 200,
) -> Template:
    """Every engine with this process's view of it: health, slots used, queues, in flight."""
    engines = await EngineService(session=session).list_engines(services_of(request.app).registry)
    placement = services_of(request.app).placement
    snapshot = placement.snapshot() if placement is not None else None
    busiest = placement.figures.busiest(BUSIEST_ADAPTERS) if placement is not None else []
    waiting = admin_reads.waiting_adapters(snapshot)
    shown = [f.version_id for f in busiest] + [w["version_id"] for w in waiting]
    context = {
        "engines": engines,
        "slots": admin_reads.engine_slots(snapshot),
        "busiest": busiest,
        "waiting": waiting,
        "labels": await admin_reads.version_labels(session, shown),
        "probes": await failing_probes(session),
        "kinds": [kind.value for kind in EngineKind],
        "base_models": await reads.base_model_names(session) if template == PAGE else [],
        "saved": saved,
    }
    return Template(template, context=context, status_code=status)
