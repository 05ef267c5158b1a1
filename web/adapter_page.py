"""The console's adapters index and one adapter's page.

The index is a searchable, paged list of cards. An adapter's page holds its card (versions,
aliases and their actions, which htmx swaps in place: web/adapters.py), where each version
is loaded right now (a fragment htmx polls), and its traffic over the last day.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, get
from litestar.di import Provide
from litestar.params import QueryParameter
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import Adapter
from loraplex.serving.live import LivePlacement
from loraplex.web import reads
from loraplex.web.adapter_placement import AdapterPlacement, adapter_placement
from loraplex.web.adapter_reads import adapter_index, adapter_traffic, card_context
from loraplex.web.adapters import provide_adapter
from loraplex.web.console import provide_tenant_id

PLACEMENT_EVERY_S = 2  # how often the page asks where the versions are


class AdapterPage(Controller):
    """`/console/adapters` (the index) and `/console/adapters/{name}` (one adapter)."""

    path = "/console/adapters"
    dependencies = {
        "tenant_id": Provide(provide_tenant_id, sync_to_thread=False),
        "adapter": Provide(provide_adapter),
    }

    @get("/", name="console.adapters")
    async def index(
        self,
        tenant_id: UUID,
        db_session: AsyncSession,
        q: Annotated[str, QueryParameter(max_length=100)] = "",
        # Not `page`: the app provides a dependency of that name (API paging).
        current_page: Annotated[int, QueryParameter(name="page", ge=1, le=1_000_000)] = 1,
    ) -> Template:
        """The adapters whose name or base model contains `q`, a page of cards at a time,
        and the form for a new one."""
        index = await adapter_index(db_session, tenant_id, q.strip(), current_page)
        bases = await reads.base_model_names(db_session)
        return Template("console/adapters.html", context={"index": index, "base_models": bases})

    @get("/{name:str}", name="console.adapter")
    async def adapter_page(
        self, request: Request[Any, Any, Any], adapter: Adapter, db_session: AsyncSession
    ) -> Template:
        """Versions and aliases with their actions, live placement, traffic."""
        context = await card_context(db_session, adapter)
        context["placement"] = _placement(request, adapter, context["card"].versions)
        context["traffic"] = await adapter_traffic(db_session, adapter)
        context["every_s"] = PLACEMENT_EVERY_S
        return Template("console/adapter.html", context=context)

    @get("/{name:str}/placement")
    async def placement_fragment(
        self, request: Request[Any, Any, Any], adapter: Adapter, db_session: AsyncSession
    ) -> Template:
        """The page's placement section, polled by htmx."""
        card = await reads.adapter_card(db_session, adapter)
        context = {
            "adapter": adapter,
            "placement": _placement(request, adapter, card.versions),
            "every_s": PLACEMENT_EVERY_S,
        }
        return Template("console/_adapter_placement.html", context=context)


def _placement(
    request: Request[Any, Any, Any], adapter: Adapter, versions: list[Any]
) -> AdapterPlacement:
    placement = request.app.state.get("placement")
    if not isinstance(placement, LivePlacement):
        return adapter_placement(None, adapter.base_model.name, versions, lambda _: [])
    base = adapter.base_model.name
    rotation = [(h.id, h.name) for h in placement.registry.candidates(base)]
    return adapter_placement(placement.snapshot(), base, versions, placement.recent_loads, rotation)
