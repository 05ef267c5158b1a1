"""Base models: registered by operators with the facts adapters are validated against."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

import msgspec
from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService

from loraplex.api.schemas import Input, Output
from loraplex.control.audit.service import record
from loraplex.db.models import BaseModel
from loraplex.errors import Conflict, InvalidInput

# `$(?!\n)`: msgspec matches patterns with re.search, where `$` also matches before a
# trailing newline ("name\n" passed); the lookahead refuses it and, unlike `\Z`, means the
# same in the OpenAPI document's (ECMA) regexes.
ModelName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$(?!\n)")]
Positive = Annotated[int, msgspec.Meta(ge=1)]


class BaseModelIn(Input):
    """A base model and its architecture facts."""

    name: ModelName
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
    architecture: str
    hidden_size: Positive
    num_layers: Positive
    vocab_size: Positive
    max_context: Positive
    modules: dict[str, list[int]]
    chat_template_sha256: str = ""


class BaseModelOut(Output):
    """A registered base model."""

    id: UUID
    name: str
    source: str
    architecture: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    max_context: int
    modules: dict[str, Any]
    chat_template_sha256: str


class BaseModelService(SQLAlchemyAsyncRepositoryService[BaseModel]):
    """Base models."""

    class Repo(SQLAlchemyAsyncRepository[BaseModel]):
        """Base models."""

        model_type = BaseModel

    repository_type = Repo

    async def register(self, data: BaseModelIn, actor: str) -> BaseModel:
        """Register a base model; its name must be free and every module a 2-D shape."""
        for module, shape in data.modules.items():
            if len(shape) != 2 or min(shape) < 1:
                raise InvalidInput(
                    f"module '{module}' needs a [out, in] shape", param=f"modules.{module}"
                )
        if not data.modules:
            raise InvalidInput("modules must list the decoder projections", param="modules")
        if await self.exists(name=data.name):
            raise Conflict(f"base model '{data.name}' is already registered", param="name")
        model = await self.create(BaseModel(**msgspec.structs.asdict(data)))
        record(self.repository.session, actor, "base_model.register", model, name=model.name)
        return model
