"""The OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import time
from typing import Any

from litestar import Controller, Request, get, post
from litestar.response import Response, Stream
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth import access
from loraplex.auth.principal import Principal, Scope
from loraplex.errors import NotFound
from loraplex.gateway.catalogue import model_ids
from loraplex.gateway.http import INFERENCE, Inference, tenant_of
from loraplex.gateway.openapi import CHAT, COMPLETIONS


class InferenceController(Controller):
    """OpenAI's inference API over Loraplex's engines."""

    tags = ["inference"]
    dependencies = INFERENCE

    @post(
        "/v1/chat/completions",
        operation_id="CreateChatCompletion",
        operation_class=CHAT,
        opt=access.tenant(Scope.INFERENCE),
        status_code=200,  # OpenAI answers 200, not Litestar's POST default of 201
    )
    async def chat(
        self, request: Request[Any, Any, Any], principal: Principal, inference: Inference
    ) -> Response[Any]:
        """Chat completion, streamed as SSE when `stream` is true."""
        return await inference.run(request, tenant_of(principal), "chat")

    @post(
        "/v1/completions",
        operation_id="CreateCompletion",
        operation_class=COMPLETIONS,
        opt=access.tenant(Scope.INFERENCE),
        status_code=200,
    )
    async def completions(
        self, request: Request[Any, Any, Any], principal: Principal, inference: Inference
    ) -> Response[Any]:
        """Text completion, streamed as SSE when `stream` is true."""
        return await inference.run(request, tenant_of(principal), "completion")

    @get(
        "/v1/chat/completions/{completion_id:str}/events",
        operation_id="ResumeChatCompletion",
        opt=access.tenant(Scope.INFERENCE),
    )
    async def resume_chat(
        self,
        request: Request[Any, Any, Any],
        completion_id: str,
        principal: Principal,
        inference: Inference,
    ) -> Stream:
        """Replay a resumable stream after `Last-Event-ID`, then follow it live."""
        return await inference.resume(request, tenant_of(principal), completion_id)

    @get(
        "/v1/completions/{completion_id:str}/events",
        operation_id="ResumeCompletion",
        opt=access.tenant(Scope.INFERENCE),
    )
    async def resume_completion(
        self,
        request: Request[Any, Any, Any],
        completion_id: str,
        principal: Principal,
        inference: Inference,
    ) -> Stream:
        """Replay a resumable completion stream after `Last-Event-ID`, then follow it live."""
        return await inference.resume(request, tenant_of(principal), completion_id)

    @get("/v1/models", operation_id="ListModels", opt=access.tenant(Scope.INFERENCE))
    async def models(self, principal: Principal, db_session: AsyncSession) -> dict[str, Any]:
        """Base models, and the tenant's adapters with their aliases and ready versions."""
        created = int(time.time())
        return {
            "object": "list",
            "data": [
                _model_card(i, created) for i in await model_ids(db_session, tenant_of(principal))
            ],
        }

    @get(
        "/v1/models/{model:path}", operation_id="RetrieveModel", opt=access.tenant(Scope.INFERENCE)
    )
    async def model(
        self, model: str, principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """One model the tenant may use: a base model, an adapter, an alias or a version."""
        name = model.lstrip("/")
        if name not in await model_ids(db_session, tenant_of(principal)):
            raise NotFound(f"The model {name!r} does not exist", param="model")
        return _model_card(name, int(time.time()))


def _model_card(model_id: str, created: int) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "loraplex"}
