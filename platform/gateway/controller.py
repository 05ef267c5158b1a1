"""The OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import time
from typing import Any

from litestar import Controller, Request, get, post
from litestar.response import Response, Stream
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth import access
from loraplex.auth.principal import Principal, Scope
from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, BaseModel, VersionStatus
from loraplex.errors import Forbidden, InvalidInput, NotFound
from loraplex.gateway.gate import headers_of
from loraplex.gateway.openapi import CHAT, COMPLETIONS
from loraplex.gateway.schemas import Kind, decode_body
from loraplex.gateway.service import Gateway

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def tenant_of(principal: Principal) -> Any:
    if principal.tenant_id is None:
        raise Forbidden(
            "inference runs as a tenant: use a tenant API key with the 'inference' scope"
        )
    return principal.tenant_id


class InferenceController(Controller):
    """OpenAI's inference API over Loraplex's engines."""

    tags = ["inference"]

    @post(
        "/v1/chat/completions",
        operation_id="CreateChatCompletion",
        operation_class=CHAT,
        opt=access.tenant(Scope.INFERENCE),
        status_code=200,  # OpenAI answers 200, not Litestar's POST default of 201
    )
    async def chat(self, request: Request[Any, Any, Any], principal: Principal) -> Response[Any]:
        """Chat completion, streamed as SSE when `stream` is true."""
        return await _run(request, principal, "chat")

    @post(
        "/v1/completions",
        operation_id="CreateCompletion",
        operation_class=COMPLETIONS,
        opt=access.tenant(Scope.INFERENCE),
        status_code=200,
    )
    async def completions(
        self, request: Request[Any, Any, Any], principal: Principal
    ) -> Response[Any]:
        """Text completion, streamed as SSE when `stream` is true."""
        return await _run(request, principal, "completion")

    @get(
        "/v1/chat/completions/{completion_id:str}/events",
        operation_id="ResumeChatCompletion",
        opt=access.tenant(Scope.INFERENCE),
    )
    async def resume_chat(
        self, request: Request[Any, Any, Any], completion_id: str, principal: Principal
    ) -> Stream:
        """Replay a resumable stream after `Last-Event-ID`, then follow it live."""
        return await _resume(request, completion_id, principal)

    @get(
        "/v1/completions/{completion_id:str}/events",
        operation_id="ResumeCompletion",
        opt=access.tenant(Scope.INFERENCE),
    )
    async def resume_completion(
        self, request: Request[Any, Any, Any], completion_id: str, principal: Principal
    ) -> Stream:
        """Replay a resumable completion stream after `Last-Event-ID`, then follow it live."""
        return await _resume(request, completion_id, principal)

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


async def model_ids(session: AsyncSession, tenant_id: Any) -> list[str]:
    """What a tenant may put in `model`: base models, then each adapter, its aliases and
    ready versions."""
    ids = list((await session.execute(select(BaseModel.name).order_by(BaseModel.name))).scalars())
    adapters = (
        (
            await session.execute(
                select(Adapter).where(Adapter.tenant_id == tenant_id).order_by(Adapter.name)
            )
        )
        .scalars()
        .all()
    )
    for adapter in adapters:
        ids.append(adapter.name)
        aliases = await session.execute(
            select(AdapterAlias.name).where(AdapterAlias.adapter_id == adapter.id)
        )
        ids.extend(f"{adapter.name}@{alias}" for alias in aliases.scalars())
        numbers = await session.execute(
            select(AdapterVersion.number).where(
                AdapterVersion.adapter_id == adapter.id,
                AdapterVersion.status == VersionStatus.READY,
            )
        )
        ids.extend(f"{adapter.name}@v{n}" for n in numbers.scalars())
    return ids


async def _run(request: Request[Any, Any, Any], principal: Principal, kind: Kind) -> Response[Any]:
    return await run_inference(request, tenant_of(principal), kind)


async def run_inference(
    request: Request[Any, Any, Any], tenant_id: Any, kind: Kind
) -> Response[Any]:
    """Run the OpenAI request in `request`'s body for `tenant_id`: limits, admission, engine,
    and a JSON or SSE answer. The console's playground runs its requests through here too."""
    received_at = request.state.get("received_at", time.monotonic())
    gateway: Gateway = request.app.state.gateway
    body = decode_body(await request.body(), kind)
    limits = await request.app.state.tenant_limits.get(tenant_id)
    call = await gateway.prepare(tenant_id, body, limits, received_at)
    headers = headers_of(call.ticket)
    if not call.stream:
        return Response(await gateway.complete(call), headers=headers)
    return Stream(
        await gateway.stream(call),
        media_type="text/event-stream",
        headers={**SSE_HEADERS, **headers},
    )


async def _resume(
    request: Request[Any, Any, Any], completion_id: str, principal: Principal
) -> Stream:
    tenant_id = tenant_of(principal)
    streams = request.app.state.gateway.resumable
    if streams is None:
        raise NotFound("resumable streams need Redis (LORAPLEX_REDIS_URL)")
    raw = request.headers.get("last-event-id")
    if raw is not None and not raw.strip().isdigit():
        raise InvalidInput(
            "Last-Event-ID must be an event id from this stream", param="Last-Event-ID"
        )
    events = await streams.read(completion_id, tenant_id, int(raw) if raw is not None else None)
    return Stream(events, media_type="text/event-stream", headers=SSE_HEADERS)
