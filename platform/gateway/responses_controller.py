"""`POST /v1/responses`: OpenAI's Responses API, stateless, over the chat completion path.

The request is checked and translated into a chat completion (`responses_schema`), which
the gateway admits and runs like any other; only the answer differs: a `response` object,
or the Responses API's typed events (`responses_events`).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Controller, Request, post
from litestar.response import Response, Stream

from loraplex.auth import access
from loraplex.auth.principal import Principal, Scope
from loraplex.control.quotas import Quotas
from loraplex.errors import InvalidInput
from loraplex.gateway.gate import headers_of
from loraplex.gateway.http import (
    INFERENCE,
    SSE_HEADERS,
    Inference,
    key_of,
    received_at,
    tenant_of,
    usage_kind_of,
)
from loraplex.gateway.openapi import RESPONSES
from loraplex.gateway.responses_body import request_echo, response_body
from loraplex.gateway.responses_events import ResponsesEncoder
from loraplex.gateway.responses_schema import (
    ResponsesRequest,
    decode_request,
    in_responses_terms,
    to_chat,
)
from loraplex.gateway.service import Gateway


class ResponsesController(Controller):
    """OpenAI's Responses API over Loraplex's engines (no stored state)."""

    tags = ["inference"]
    dependencies = INFERENCE

    @post(
        "/v1/responses",
        operation_id="CreateResponse",
        operation_class=RESPONSES,
        opt=access.tenant(Scope.INFERENCE),
        status_code=200,  # OpenAI answers 200, not Litestar's POST default of 201
    )
    async def create(
        self, request: Request[Any, Any, Any], principal: Principal, inference: Inference
    ) -> Response[Any]:
        """Create a response, streamed as typed SSE events when `stream` is true."""
        tenant_id = tenant_of(principal)
        body = decode_request(await request.body())
        limits = await inference.tenant_limits.get(tenant_id)
        arrived, key_id = received_at(request), key_of(request)
        return await run_response(
            inference.gateway, tenant_id, body, limits, arrived, key_id, usage_kind_of(request)
        )


async def run_response(
    gateway: Gateway,
    tenant_id: UUID,
    body: ResponsesRequest,
    limits: Quotas,
    arrived: float,
    key_id: UUID | None = None,
    usage_kind: str = "inference",
) -> Response[Any]:
    """Run a Responses API request for `tenant_id`: a `response` object, or its events as
    SSE."""
    chat = to_chat(body)
    echo = request_echo(body)
    try:
        call = await gateway.prepare(
            tenant_id, chat, limits, arrived, key_id, usage_kind=usage_kind
        )
    except InvalidInput as exc:
        raise in_responses_terms(exc) from None
    headers = headers_of(call.admission)
    response_id, model = f"resp_{call.request_id}", call.target.model
    if not call.stream:
        _, taken, buffer = await gateway.run_whole(call)
        return Response(response_body(response_id, model, echo, taken, buffer), headers=headers)
    events = await gateway.stream(
        call, encoder_for=lambda _completion_id: ResponsesEncoder(response_id, model, echo)
    )
    return Stream(events, media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
