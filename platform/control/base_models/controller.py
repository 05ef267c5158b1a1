"""HTTP routes for base models."""

from __future__ import annotations

from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, get, post

from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.base_models.service import BaseModelIn, BaseModelOut, BaseModelService
from loraplex.errors import NotFound


class BaseModelController(Controller):
    """Operators register base models; every key may list them."""

    tags = ["base-models"]
    dependencies = providers.create_service_dependencies(BaseModelService, key="base_models")

    @post("/api/v1/base-models", operation_id="RegisterBaseModel", opt=access.OPERATOR)
    async def register(
        self, data: BaseModelIn, base_models: BaseModelService, principal: Principal
    ) -> BaseModelOut:
        """Register a base model with its architecture facts."""
        return base_models.to_schema(
            await base_models.register(data, principal.actor), schema_type=BaseModelOut
        )

    @get("/api/v1/base-models", operation_id="ListBaseModels", opt=access.tenant("read"))
    async def list_base_models(
        self, base_models: BaseModelService, page: LimitOffset
    ) -> OffsetPagination[BaseModelOut]:
        """Registered base models."""
        items, total = await base_models.get_many_and_count(page, OrderBy("name", "asc"))
        return base_models.to_schema(items, total, filters=[page], schema_type=BaseModelOut)

    @get(
        "/api/v1/base-models/{model_id:uuid}",
        operation_id="GetBaseModel",
        opt=access.tenant("read"),
    )
    async def get_base_model(self, model_id: UUID, base_models: BaseModelService) -> BaseModelOut:
        """One base model."""
        model = await base_models.get_one_or_none(id=model_id)
        if model is None:
            raise NotFound("base model not found")
        return base_models.to_schema(model, schema_type=BaseModelOut)
