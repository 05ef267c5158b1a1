"""Carrying out the policy's loads and evictions on one engine node.

`LocalOps` does it inside this process (single-node mode, and inside `loraplex agent`):
the node disk cache plus the engine driver. `AgentOps` asks the node's agent over HTTP
(multi-node mode). `OpsRouter` picks one per engine: the agent when the engine row has an
`agent_url`, otherwise the local one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Collection
from typing import Protocol
from uuid import UUID

import httpx

from loraplex.adapters.errors import StoreError, StoreUnavailable
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.engines import EngineError, EngineUnavailable
from loraplex.serving.live.facts import VersionFacts
from loraplex.serving.loader import engine_adapter_name, ensure_on_engine
from loraplex.serving.policy import Tier
from loraplex.serving.registry import EngineHandle

log = logging.getLogger("loraplex.serving.live")


class NodeOps(Protocol):
    """The I/O behind the policy's actions on one node."""

    async def fetch(self, handle: EngineHandle, facts: VersionFacts) -> Tier:
        """Object store -> node disk; where the version was: COLD when it was fetched now."""
        ...

    async def load(self, handle: EngineHandle, facts: VersionFacts) -> Tier:
        """Make the version loaded on the engine; returns where it came from."""
        ...

    async def unload(self, handle: EngineHandle, version_id: UUID) -> None:
        """Unload the version from the engine (a no-op if it is not there)."""
        ...

    def held(self, handle: EngineHandle, version_ids: Collection[UUID]) -> None:
        """The engine holds exactly these versions now (loaded, adopted, or dropped)."""
        ...

    def discard(self, version_id: UUID) -> None:
        """The node's disk copy is no longer wanted."""
        ...


class LocalOps:
    """Loads through the in-process disk cache and the engine's driver.

    While an engine holds a version, its folder stays pinned in the disk cache: vLLM and
    SGLang re-read an adapter's path when their own LRU dropped it and a request names it
    again, so the folder must outlive the load call (loader.py explains the SGLang case).
    """

    def __init__(self, cache: DiskCache) -> None:
        self.cache = cache
        self._held: dict[str, set[UUID]] = {}  # engine id -> versions pinned for it

    async def fetch(self, handle: EngineHandle, facts: VersionFacts) -> Tier:
        """Pull the version into the disk cache (COLD: it was not there)."""
        found = Tier.DISK if facts.version_id in self.cache else Tier.COLD
        await self.cache.ensure(facts.version_id, facts.storage_key, dict(facts.files))
        return found

    async def load(self, handle: EngineHandle, facts: VersionFacts) -> Tier:
        """Load through the shared single-flight loader, then keep the folder pinned."""
        placement = await ensure_on_engine(
            handle, facts.version_id, facts.storage_key, dict(facts.files), self.cache
        )
        self._hold(handle.id, facts.version_id)
        return placement.tier

    async def unload(self, handle: EngineHandle, version_id: UUID) -> None:
        """Unload from the engine, forget the name, release the folder."""
        name = engine_adapter_name(version_id)
        await handle.driver.unload(name)
        handle.loaded.discard(name)
        self._let_go(handle.id, version_id)

    def held(self, handle: EngineHandle, version_ids: Collection[UUID]) -> None:
        """Pin folders of versions the engine gained by itself, release the ones it lost."""
        current = self._held.get(handle.id, set())
        for version_id in set(version_ids) - current:
            self._hold(handle.id, version_id)
        for version_id in current - set(version_ids):
            self._let_go(handle.id, version_id)

    def discard(self, version_id: UUID) -> None:
        """Remove the disk copy; one an engine still holds (pinned) goes when it lets go."""
        self.cache.discard(version_id)

    def _hold(self, engine_id: str, version_id: UUID) -> None:
        held = self._held.setdefault(engine_id, set())
        if version_id not in held:
            held.add(version_id)
            self.cache.pin(version_id)

    def _let_go(self, engine_id: str, version_id: UUID) -> None:
        held = self._held.get(engine_id)
        if held is not None and version_id in held:
            held.discard(version_id)
            self.cache.unpin(version_id)


class AgentOps:
    """Loads through the node's `loraplex agent`, which owns that node's disk cache.

    The agent keeps its own cache within its budget: the policy's disk-tier evictions are
    no-ops here, and the only evictor of that node's disk is the agent's cache's own LRU
    (disk_cache.py). `/load` pulls a version on a miss; the disk-tier load before it, which
    the policy runs before it evicts anything from the engine for the version, asks
    `/fetchable`: with the object store down it fails, and no loaded adapter made room for
    a load that could not happen. (It checks rather than downloads: on a node whose disk
    budget is tight, the LRU would let an unpinned fetched copy go before the load.) Each request
    carries the engine's own agent secret, the one its agent registered (auth/agent_token.py),
    and then never the shared token: that node learns nothing that opens another agent. An
    engine without one (an operator's, or an agent from before it existed) gets the shared
    agent token (`LORAPLEX_AGENT_TOKEN`) when one is set.
    """

    def __init__(
        self,
        agent_url: str,
        timeout_s: float = 120.0,
        http: httpx.AsyncClient | None = None,
        token: str = "",
    ) -> None:
        self.agent_url = agent_url.rstrip("/")
        self._http = http or httpx.AsyncClient(base_url=self.agent_url, timeout=timeout_s)
        self._token = token

    async def fetch(self, handle: EngineHandle, facts: VersionFacts) -> Tier:
        """POST /fetchable: fails as the store does (StoreUnavailable while it is down);
        the download itself is `/load`'s. An agent from before `/fetchable` answers 404."""
        with contextlib.suppress(_NotServed):
            await self._post(handle, "/fetchable", _version_body(facts))
        return Tier.DISK

    async def load(self, handle: EngineHandle, facts: VersionFacts) -> Tier:
        """POST /load; the agent answers with the engine-side name and where it came from."""
        answer = await self._post(handle, "/load", _version_body(facts))
        handle.loaded.add(str(answer["name"]))
        return Tier[str(answer["tier"]).upper()]

    async def unload(self, handle: EngineHandle, version_id: UUID) -> None:
        """POST /unload."""
        name = engine_adapter_name(version_id)
        await self._post(handle, "/unload", {"name": name})
        handle.loaded.discard(name)

    def held(self, handle: EngineHandle, version_ids: Collection[UUID]) -> None:
        """The agent follows its engine itself (on `GET /adapters`)."""

    def discard(self, version_id: UUID) -> None:
        """The agent's cache evicts by its own budget (its LRU), not by this decision."""

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()

    def auth(self, handle: EngineHandle) -> dict[str, str]:
        """The bearer for `handle`'s agent: its own secret, else the shared token, if any."""
        token = handle.agent_secret or self._token
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def _post(
        self, handle: EngineHandle, path: str, body: dict[str, object]
    ) -> dict[str, object]:
        try:
            response = await self._http.post(path, json=body, headers=self.auth(handle))
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"agent {self.agent_url} unreachable: {exc}") from exc
        if response.status_code in (404, 405):
            raise _NotServed(f"agent {self.agent_url} has no {path}")
        if response.status_code >= 400:
            raise _agent_error(response, f"agent {self.agent_url}{path}: {response.text[:300]}")
        answer: dict[str, object] = response.json()
        return answer


class _NotServed(EngineError):
    """The agent has no such route (one from an earlier release)."""


def _version_body(facts: VersionFacts) -> dict[str, object]:
    return {
        "version_id": str(facts.version_id),
        "storage_key": facts.storage_key,
        "files": dict(facts.files),
    }


def _agent_error(response: httpx.Response, detail: str) -> Exception:
    """The agent's refusal as the error the gateway would have raised loading in-process:
    the object store's failures keep their meaning (a 503 with Retry-After for the client),
    anything else is the engine side's."""
    try:
        body = response.json()
    except ValueError:
        body = None
    problem = str(body.get("type", "")) if isinstance(body, dict) else ""
    code = problem.rpartition(":")[2]
    if code == "object_store_unavailable":
        return StoreUnavailable(detail)
    if code == "object_store_error":
        return StoreError(detail)
    return EngineError(detail)


class OpsRouter:
    """The ops for an engine: its agent's when it has one, the in-process ones otherwise."""

    def __init__(
        self,
        local: LocalOps,
        agent: Callable[[str], AgentOps] | None = None,
        agent_token: str = "",
    ) -> None:
        self.local = local
        self._make_agent = agent or functools.partial(AgentOps, token=agent_token)
        self._agents: dict[str, AgentOps] = {}

    def for_engine(self, handle: EngineHandle) -> NodeOps:
        """LocalOps, or the (shared, cached) AgentOps of the engine's agent."""
        if not handle.agent_url:
            return self.local
        agent = self._agents.get(handle.agent_url)
        if agent is None:
            agent = self._agents[handle.agent_url] = self._make_agent(handle.agent_url)
        return agent

    async def aclose(self) -> None:
        """Close the agents' HTTP clients."""
        for agent in self._agents.values():
            await agent.aclose()
        self._agents.clear()
