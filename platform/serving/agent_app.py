"""The node agent's HTTP API: load and unload adapters on the node's engine, list them.

One agent runs beside each engine in a multi-node deployment (`loraplex agent`). It owns the
node's disk cache (byte budget, pulls from the object store with sha256 checks) and does the
same work the API process does in-process in single-node mode, through the same `LocalOps`.
The gateway calls it when the engine's row has an `agent_url`.

Whoever reaches the agent can make the engine load and unload adapters, so every route but
the probes (`/healthz`, `/readyz`) asks for the shared `LORAPLEX_AGENT_TOKEN` as a bearer
token (`AgentOps` sends it). Without a token the agent serves only on a loopback address (one
machine, for development).
"""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any

import msgspec
from litestar import Litestar, Response, get, post
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from loraplex.auth.agent_token import check_agent_token
from loraplex.errors import InvalidInput, exception_handlers
from loraplex.serving.agent_registration import Registrar
from loraplex.serving.live.facts import VersionFacts
from loraplex.serving.live.ops import LocalOps
from loraplex.serving.loader import engine_adapter_name, version_id_from_engine_name
from loraplex.serving.registry import EngineHandle

# The agent loads what the gateway already decided to place; owner and size do not matter.
NOBODY = uuid.UUID(int=0)


class LoadIn(msgspec.Struct, frozen=True):
    """A version to make loaded on this node's engine."""

    version_id: uuid.UUID
    storage_key: str
    files: dict[str, str]  # file name -> sha256


class UnloadIn(msgspec.Struct, frozen=True):
    """An engine-side adapter name to unload."""

    name: str


class AgentExposed(ValueError):
    """The agent would listen beyond loopback with no token to check."""


def check_bind(host: str, token: str) -> None:
    """Refuse to serve a non-loopback address without a token (AgentExposed says why)."""
    if token or is_loopback(host):
        return
    raise AgentExposed(
        f"refusing to serve the agent on {host} without a token: anyone who reaches it could "
        "load and unload adapters. Set LORAPLEX_AGENT_TOKEN here and on the API processes, "
        "or bind to 127.0.0.1."
    )


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere


def bearer_guard(token: str) -> Guard:
    """A guard answering 401 unless the request carries `Authorization: Bearer <token>`."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        check_agent_token(connection.headers, token)

    return guard


def create_agent_app(
    handle: EngineHandle, ops: LocalOps, token: str = "", registrar: Registrar | None = None
) -> Litestar:
    """The agent app for one engine (its handle) and this node's disk cache (in `ops`).

    With a `token`, every route but the probes requires it as a bearer token; without one,
    the caller must bind to loopback only (`check_bind`). With a `registrar`, the agent
    registers its engine with the API while it runs, and `/readyz` waits for that.
    """
    guards = [bearer_guard(token)] if token else []

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        """The agent process answers (liveness)."""
        return {"status": "ok"}

    @get("/readyz")
    async def readyz() -> Response[dict[str, Any]]:
        """Ready once the engine is registered with the API (always, without a registrar)."""
        ready = registrar is None or registrar.registered
        body = {"status": "ready" if ready else "registering", "engine": handle.url}
        return Response(body, status_code=200 if ready else 503)

    @post("/load", status_code=200, guards=guards)
    async def load(data: LoadIn) -> dict[str, Any]:
        """Pull the version if needed and load it; answers its engine-side name and tier."""
        facts = VersionFacts(data.version_id, NOBODY, 0, 0, data.storage_key, data.files)
        tier = await ops.load(handle, facts)
        return {"name": engine_adapter_name(data.version_id), "tier": tier.name.lower()}

    @post("/unload", status_code=200, guards=guards)
    async def unload(data: UnloadIn) -> dict[str, Any]:
        """Unload an adapter Loraplex named; its disk copy may be evicted afterwards."""
        version_id = version_id_from_engine_name(data.name)
        if version_id is None:
            raise InvalidInput("not an adapter name Loraplex made", param="name")
        await ops.unload(handle, version_id)
        return {"name": data.name}

    @get("/adapters", guards=guards)
    async def adapters() -> dict[str, Any]:
        """What the engine holds now; folders of adapters it dropped are released."""
        handle.loaded = await handle.driver.list_loaded()
        ops.held(
            handle, [v for v in map(version_id_from_engine_name, handle.loaded) if v is not None]
        )
        cache = ops.cache
        return {
            "adapters": sorted(handle.loaded),
            "cache": {"used_bytes": cache.used_bytes, "budget_bytes": cache.budget_bytes},
        }

    async def open_() -> None:
        if registrar is not None:
            await registrar.start()

    async def close() -> None:
        if registrar is not None:
            await registrar.stop()  # deregisters first: no request should come in after
        await handle.driver.aclose()
        await ops.cache.aclose()

    return Litestar(
        [healthz, readyz, load, unload, adapters],
        exception_handlers=exception_handlers(),
        on_startup=[open_],
        on_shutdown=[close],
    )
