"""The HTTP side of inference, shared by the `/v1` routes and the console's playground:
who the caller runs as, the body decoded, the tenant's limits looked up, and the gateway's
answer as JSON or an SSE stream."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from litestar import Request
from litestar.di import Provide
from litestar.response import Response, Stream

from loraplex.auth.principal import Principal
from loraplex.errors import Forbidden, InvalidInput
from loraplex.gateway.gate import headers_of
from loraplex.gateway.limits import TenantLimits
from loraplex.gateway.schemas import Kind, decode_body
from loraplex.gateway.service import Gateway

EVENT_ID = re.compile(r"[0-9]{1,18}")  # a stream's event count never nears 10**18
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def tenant_of(principal: Principal) -> UUID:
    """The tenant a request runs as; an operator key has none."""
    if principal.tenant_id is None:
        raise Forbidden(
            "inference runs as a tenant: use a tenant API key with the 'inference' scope"
        )
    return principal.tenant_id


def key_of(request: Request[Any, Any, Any]) -> UUID | None:
    """The API key the request came with (its budgets apply); None for a console session
    without one."""
    user = request.scope.get("user")
    return user.key_id if isinstance(user, Principal) else None


def usage_kind_of(request: Request[Any, Any, Any]) -> str:
    """What the request's tokens are in the tenant's spend: its key's kind ("eval" for an
    eval run's key), "inference" without a key."""
    user = request.scope.get("user")
    return user.usage_kind if isinstance(user, Principal) else "inference"


def received_at(request: Request[Any, Any, Any]) -> float:
    """When the app first saw the request (set by authentication), else now."""
    return float(request.state.get("received_at", time.monotonic()))


@dataclass(frozen=True)
class Inference:
    """What an inference route needs from the process: the gateway and tenants' limits."""

    gateway: Gateway
    tenant_limits: TenantLimits

    async def run(
        self, request: Request[Any, Any, Any], tenant_id: UUID, kind: Kind
    ) -> Response[Any]:
        """Run the OpenAI request in `request`'s body for `tenant_id`: limits, admission,
        engine, and a JSON or SSE answer."""
        arrived = received_at(request)
        body = decode_body(await request.body(), kind)
        limits = await self.tenant_limits.get(tenant_id)
        call = await self.gateway.prepare(
            tenant_id, body, limits, arrived, key_of(request), usage_kind=usage_kind_of(request)
        )
        headers = headers_of(call.admission)
        if not call.stream:
            return Response(await self.gateway.complete(call), headers=headers)
        return Stream(
            await self.gateway.stream(call),
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **headers},
        )

    async def resume(
        self, request: Request[Any, Any, Any], tenant_id: UUID, completion_id: str
    ) -> Stream:
        """Replay a resumable stream after `Last-Event-ID`, then follow it live."""
        last = last_event_id(request.headers.get("last-event-id"))
        limits = await self.tenant_limits.get(tenant_id)
        events = await self.gateway.resume(tenant_id, limits, completion_id, last)
        return Stream(events, media_type="text/event-stream", headers=SSE_HEADERS)


def last_event_id(raw: str | None) -> int | None:
    """The `Last-Event-ID` header as an event id; ASCII digits only ("²".isdigit() is true,
    and int() refuses it), and no more of them than an event id can have."""
    if raw is None:
        return None
    if not EVENT_ID.fullmatch(raw.strip()):
        raise InvalidInput(
            "Last-Event-ID must be an event id from this stream", param="Last-Event-ID"
        )
    return int(raw)


def provide_inference(gateway: Gateway, tenant_limits: TenantLimits) -> Inference:
    """The `inference` dependency of the inference routes and the playground."""
    return Inference(gateway, tenant_limits)


INFERENCE = {"inference": Provide(provide_inference, sync_to_thread=False)}
