"""The console's adapters index and one adapter's page.

The index is a searchable, paged list of cards. An adapter's page holds its card (versions,
aliases and their actions, which htmx swaps in place: web/adapters.py), where each version
is loaded right now (a fragment htmx polls), each version's eval scores (web/eval_reads.py),
and its traffic over the last day.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, get
from litestar.di import Provide
from litestar.params import QueryParameter
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.control.adapters.schemas import VersionOut
from loraplex.db.models import Adapter
from loraplex.serving.live import LivePlacement
from loraplex.web import reads
from loraplex.web.adapter_placement import AdapterPlacement, adapter_placement
from loraplex.web.adapter_reads import (
    adapter_index,
    adapter_traffic,
    adapter_versions,
    card_context,
)
from loraplex.web.adapters import provide_adapter
from loraplex.web.console import provide_tenant_id
from loraplex.web.eval_reads import version_scores
from loraplex.web.paging import PageAsked, page_number

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
        page_asked: PageAsked = "",
    ) -> Template:
        """The adapters whose name or base model contains `q`, a page of cards at a time,
        and the form for a new one."""
        index = await adapter_index(db_session, tenant_id, q.strip(), page_number(page_asked))
        bases = await reads.base_model_names(db_session)
        return Template("console/adapters.html", context={"index": index, "base_models": bases})

    @get("/{name:str}", name="console.adapter")
    async def adapter_page(
        self, request: Request[Any, Any, Any], adapter: Adapter, db_session: AsyncSession
    ) -> Template:
        """Versions and aliases with their actions, live placement, traffic."""
        context = await card_context(db_session, adapter)
        placement = services_of(request.app).placement
        context["placement"] = _placement(placement, adapter, context["card"].versions)
        context["traffic"] = await adapter_traffic(db_session, adapter)
        context["scores"] = await version_scores(db_session, adapter)
        context["every_s"] = PLACEMENT_EVERY_S
        return Template("console/adapter.html", context=context)

    @get("/{name:str}/placement")
    async def placement_fragment(
        self, request: Request[Any, Any, Any], adapter: Adapter, db_session: AsyncSession
    ) -> Template:
        """The page's placement section, polled by htmx: the adapter's versions only, and
        only their tiers (not the whole placement map)."""
        versions = await adapter_versions(db_session, adapter)
        context = {
            "adapter": adapter,
            "placement": _placement(services_of(request.app).placement, adapter, versions),
            "every_s": PLACEMENT_EVERY_S,
        }
        return Template("console/_adapter_placement.html", context=context)


def _placement(
    placement: LivePlacement | None, adapter: Adapter, versions: Sequence[VersionOut]
) -> AdapterPlacement:
    """Where each ready version of `adapter` is on its base model's engines right now (not
    live where this process places nothing), with its recent loads."""
    if placement is None:
        return adapter_placement(None, {}, versions, lambda _: [])
    engines = placement.engines_for(adapter.base_model.name)
    placed = placement.tiers_of(str(v.id) for v in versions)
    return adapter_placement(engines, placed, versions, placement.recent_loads)
