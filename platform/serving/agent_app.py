"""The node agent's HTTP API: load and unload adapters on the node's engine, list them.

One agent runs beside each engine in a multi-node deployment (`loraplex agent`). It owns the
node's disk cache (byte budget, pulls from the object store with sha256 checks) and does the
same work the API process does in-process in single-node mode, through the same `LocalOps`.
The gateway calls it when the engine's row has an `agent_url`.

Whoever reaches the agent can make the engine load and unload adapters, so every route but
the probes (`/healthz`, `/readyz`) asks for a bearer token (`AgentOps` sends it): the secret
this agent made at start and registered with the API (auth/agent_token.py), which no other
node knows, or the shared `LORAPLEX_AGENT_TOKEN` when that is set here. With neither, the
agent serves only on a loopback address (one machine, for development). `/metrics`
(agent_metrics.py) is open: its series name no tenant.
`POST /drain` (agent_drain.py) is for the node itself: it is taken from a loopback address
(the pod's preStop hook) or with the node's own credential.
"""

from __future__ import annotations

import hmac
import ipaddress
import uuid
from typing import Any

import msgspec
from litestar import Litestar, Response, get, post
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from loraplex.auth.agent_token import check_agent_token
from loraplex.errors import Forbidden, InvalidInput, exception_handlers
from loraplex.serving.agent_drain import Drainer
from loraplex.serving.agent_metrics import AgentMetrics
from loraplex.serving.agent_registration import Registrar
from loraplex.serving.live.facts import VersionFacts
from loraplex.serving.live.ops import LocalOps
from loraplex.serving.loader import engine_adapter_name, version_id_from_engine_name
from loraplex.serving.registry import EngineHandle

# The agent loads what the gateway already decided to place; owner and size do not matter.
NOBODY = uuid.UUID(int=0)


class LoadIn(msgspec.Struct, frozen=True):
    """A version to fetch onto this node's disk, or to make loaded on its engine."""

    version_id: uuid.UUID
    storage_key: str
    files: dict[str, str]  # file name -> sha256


class UnloadIn(msgspec.Struct, frozen=True):
    """An engine-side adapter name to unload."""

    name: str


class AgentExposed(ValueError):
    """The agent would listen beyond loopback with no token to check."""


def check_bind(host: str, token: str) -> None:
    """Refuse to serve a non-loopback address without a token (AgentExposed says why); an
    agent that registers itself has one: its own secret."""
    if token or is_loopback(host):
        return
    raise AgentExposed(
        f"refusing to serve the agent on {host} without a token: anyone who reaches it could "
        "load and unload adapters. Register it with the API (--register-with: it then "
        "accepts only its own secret), set LORAPLEX_AGENT_TOKEN here and on the API "
        "processes, or bind to 127.0.0.1."
    )


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere


def bearer_guard(*tokens: str) -> Guard:
    """A guard answering 401 unless the request carries `Authorization: Bearer <t>` for one
    of the (non-empty) `tokens`."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        check_agent_token(connection.headers, *tokens)

    return guard


def node_guard(credential: str) -> Guard:
    """A guard answering 403 unless the caller is on this node: a loopback address, or
    `Authorization: Bearer <this node's credential>`."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if connection.client is not None and is_loopback(connection.client.host):
            return
        presented = connection.headers.get("authorization", "").partition(" ")[2]
        if credential and hmac.compare_digest(presented.strip().encode(), credential.encode()):
            return
        raise Forbidden("drain is taken from this node only (loopback or its node credential)")

    return guard


def create_agent_app(
    handle: EngineHandle,
    ops: LocalOps,
    token: str = "",
    registrar: Registrar | None = None,
    node_credential: str = "",
    drain_wait_s: float = 600.0,
) -> Litestar:
    """The agent app for one engine (its handle) and this node's disk cache (in `ops`).

    With a `registrar`, the agent registers its engine with the API while it runs, and
    `/readyz` waits for that; every route but the probes and `/drain` then requires the
    secret it registered (its `agent_secret`) as a bearer token, or `token` (the shared one)
    if given. With neither, the caller must bind to loopback only (`check_bind`).
    `/drain` waits at most `drain_wait_s` unless the call says `?wait_s=`.
    """
    own_secret = registrar.registration.agent_secret if registrar is not None else ""
    guards = [bearer_guard(own_secret, token)] if own_secret or token else []
    drainer = Drainer(handle, registrar)
    metrics = AgentMetrics(ops.cache, registrar)

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        """The agent process answers (liveness)."""
        return {"status": "ok"}

    @get("/readyz")
    async def readyz() -> Response[dict[str, Any]]:
        """Ready once the engine is registered with the API (always, without a registrar)."""
        ready = registrar is None or registrar.registered
        body: dict[str, Any] = {"status": "ready" if ready else "registering", "engine": handle.url}
        if registrar is not None:  # what the API was last told
            body.update(engine_up=registrar.engine_up, draining=registrar.draining)
        return Response(body, status_code=200 if ready else 503)

    @post("/fetchable", status_code=200, guards=guards)
    async def fetchable(data: LoadIn) -> dict[str, Any]:
        """Whether this node can get the version onto its disk now: it is there, or the
        object store answers for each of its files (a 503 while the store is down). The
        gateway asks before it evicts an adapter from the engine to make room for the
        version, so an object store outage costs no loaded adapter."""
        on_disk = await ops.cache.check_fetchable(data.version_id, data.storage_key, data.files)
        return {"name": engine_adapter_name(data.version_id), "on_disk": on_disk}

    @post("/load", status_code=200, guards=guards)
    async def load(data: LoadIn) -> dict[str, Any]:
        """Pull the version if needed and load it; answers its engine-side name and tier."""
        facts = VersionFacts(data.version_id, NOBODY, 0, 0, data.storage_key, data.files)
        with metrics.timed_load():
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

    @post("/drain", status_code=200, guards=[node_guard(node_credential)])
    async def drain(wait_s: float | None = None) -> dict[str, Any]:
        """Take the engine out of rotation, then wait until it has nothing in flight."""
        if wait_s is not None and wait_s < 0:
            raise InvalidInput("wait_s must not be negative", param="wait_s")
        outcome = await drainer.drain(drain_wait_s if wait_s is None else wait_s)
        return {
            "drained": outcome.drained,
            "announced": outcome.announced,
            "in_flight": outcome.in_flight,
            "waited_s": round(outcome.waited_s, 3),
        }

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

    @get("/metrics", media_type="text/plain; version=0.0.4; charset=utf-8")
    async def metrics_page() -> bytes:
        """The node's series (agent_metrics.py): open, as they name no tenant or adapter."""
        return metrics.page()

    async def open_() -> None:
        if registrar is not None:
            await registrar.start()

    async def close() -> None:
        if registrar is not None and registrar.draining:
            # Deregistering makes every API process close its client to the engine, which
            # would cut the streams still running there (a drain that ran out of wait_s,
            # then SIGTERM to the whole pod): let the engine finish them first.
            await drainer.drain(drain_wait_s)
        if registrar is not None:
            await registrar.stop()  # deregisters first: no request should come in after
        await handle.driver.aclose()
        await ops.cache.aclose()

    return Litestar(
        [healthz, readyz, fetchable, load, unload, drain, adapters, metrics_page],
        exception_handlers=exception_handlers(),
        on_startup=[open_],
        on_shutdown=[close],
    )
