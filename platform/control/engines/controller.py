"""HTTP routes for inference engines (operators only)."""

from __future__ import annotations

from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, delete, get, post

from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.engines.schemas import EngineAdaptersOut, EngineCreate, EngineOut
from loraplex.control.engines.service import EngineService
from loraplex.serving.registry import EngineRegistry

ENGINES = "/api/v1/engines"
ENGINE = ENGINES + "/{engine_id:uuid}"


class EngineController(Controller):
    """Register, list, inspect and retire the engines the gateway routes to."""

    tags = ["engines"]
    dependencies = providers.create_service_dependencies(EngineService, key="engines")

    @post(ENGINES, operation_id="RegisterEngine", opt=access.OPERATOR)
    async def register(
        self,
        data: EngineCreate,
        engines: EngineService,
        registry: EngineRegistry | None,
        principal: Principal,
    ) -> EngineOut:
        """Register an engine; it takes requests once its first health probe answers."""
        return await engines.register(data, principal.actor, registry)

    @get(ENGINES, operation_id="ListEngines", opt=access.OPERATOR)
    async def list_engines(
        self, engines: EngineService, registry: EngineRegistry | None, page: LimitOffset
    ) -> OffsetPagination[EngineOut]:
        """Every engine (registered and from settings) with its health, by name."""
        items = await engines.list_engines(registry)
        window = items[page.offset : page.offset + page.limit]
        return OffsetPagination(window, page.limit, page.offset, len(items))

    @get(ENGINE, operation_id="GetEngine", opt=access.OPERATOR)
    async def get_engine(
        self, engine_id: UUID, engines: EngineService, registry: EngineRegistry | None
    ) -> EngineOut:
        """One engine."""
        return await engines.view(engine_id, registry)

    @delete(ENGINE, operation_id="DeregisterEngine", opt=access.OPERATOR)
    async def deregister(
        self,
        engine_id: UUID,
        engines: EngineService,
        registry: EngineRegistry | None,
        principal: Principal,
    ) -> None:
        """Remove a registered engine (engines from settings are removed there)."""
        await engines.deregister(engine_id, principal.actor, registry)

    @get(ENGINE + "/adapters", operation_id="ListEngineAdapters", opt=access.OPERATOR)
    async def loaded_adapters(
        self, engine_id: UUID, engines: EngineService, registry: EngineRegistry | None
    ) -> EngineAdaptersOut:
        """The adapters the engine holds, with the tenant, adapter and version of each."""
        return await engines.loaded_adapters(engine_id, registry)
