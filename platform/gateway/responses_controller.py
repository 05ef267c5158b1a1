"""`POST /v1/responses`: OpenAI's Responses API, stateless, over the chat completion path.

The request is checked and translated into a chat completion (`responses_schema`), which
the gateway admits and runs like any other; only the answer differs: a `response` object,
or the Responses API's typed events (`responses_events`).
"""

from __future__ import annotations

import time
from typing import Any

from litestar import Controller, Request, post
from litestar.response import Response, Stream

from loraplex.auth import access
from loraplex.auth.principal import Principal, Scope
from loraplex.errors import InvalidInput
from loraplex.gateway.controller import SSE_HEADERS, tenant_of
from loraplex.gateway.gate import headers_of
from loraplex.gateway.openapi import RESPONSES
from loraplex.gateway.responses_body import request_echo, response_body
from loraplex.gateway.responses_events import ResponsesEncoder
from loraplex.gateway.responses_schema import decode_request, in_responses_terms, to_chat
from loraplex.gateway.service import Gateway


class ResponsesController(Controller):
    """OpenAI's Responses API over Loraplex's engines (no stored state)."""

    tags = ["inference"]

    @post(
        "/v1/responses",
        operation_id="CreateResponse",
        operation_class=RESPONSES,
        opt=access.tenant(Scope.INFERENCE),
        status_code=200,  # OpenAI answers 200, not Litestar's POST default of 201
    )
    async def create(self, request: Request[Any, Any, Any], principal: Principal) -> Response[Any]:
        """Create a response, streamed as typed SSE events when `stream` is true."""
        return await run_response(request, tenant_of(principal))


async def run_response(request: Request[Any, Any, Any], tenant_id: Any) -> Response[Any]:
    """Run the Responses API request in `request`'s body for `tenant_id`: a `response`
    object, or its events as SSE."""
    received_at = request.state.get("received_at", time.monotonic())
    gateway: Gateway = request.app.state.gateway
    body = decode_request(await request.body())
    chat = to_chat(body)
    echo = request_echo(body)
    limits = await request.app.state.tenant_limits.get(tenant_id)
    try:
        call = await gateway.prepare(tenant_id, chat, limits, received_at)
    except InvalidInput as exc:
        raise in_responses_terms(exc) from None
    headers = headers_of(call.ticket)
    response_id, model = f"resp_{call.request_id}", call.target.model
    if not call.stream:
        _, taken, buffer = await gateway.run_whole(call)
        return Response(response_body(response_id, model, echo, taken, buffer), headers=headers)
    events = await gateway.stream(
        call, encoder_for=lambda _completion_id: ResponsesEncoder(response_id, model, echo)
    )
    return Stream(events, media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
