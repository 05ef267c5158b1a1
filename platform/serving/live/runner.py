"""Carrying out the core's Load and Evict actions, and reporting back what happened.

Each batch runs in order — the evictions a load made room with are done before that load
starts, so an engine never holds more adapters than its host slots — while the loads
themselves run concurrently. An action for an engine incarnation that has since left the
core is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from loraplex.observability import metrics
from loraplex.serving.live.load_times import LoadTime, LoadTimes
from loraplex.serving.live.pool import Pool
from loraplex.serving.policy import Action, Evict, EvictReason, Load, Tier

if TYPE_CHECKING:
    from loraplex.serving.live.placement import LivePlacement
    from loraplex.serving.registry import EngineHandle

log = logging.getLogger("loraplex.serving.live")


class ActionRunner:
    """Performs actions through each engine's ops and feeds the outcomes to the core."""

    def __init__(self, placement: LivePlacement) -> None:
        self.placement = placement
        self.loads = 0
        self.unloads = 0
        self.load_times = LoadTimes()  # the last few engine loads per version (the console)
        self._tasks: set[asyncio.Task[None]] = set()
        self._unloaded: dict[str, dict[str, float]] = {}  # node -> version -> when

    def apply(self, pool: Pool, actions: Sequence[Action]) -> None:
        """Start carrying out a batch, each action on the engine it names, in order per
        engine (no-op for an empty batch). A request's route may name two engines: its
        own, and one its adapter is copied to (`PolicyCore._spread`)."""
        by_node: dict[str, list[Action]] = {}
        for action in actions:
            by_node.setdefault(action.node_id, []).append(action)
        for node_id, batch in by_node.items():
            self._spawn(self._perform(pool, node_id, pool.epoch(node_id), batch))

    def recently_unloaded(self, node_id: str) -> set[str]:
        """Versions unloaded from the node within the grace period."""
        recent = self._unloaded.get(node_id)
        if not recent:
            return set()
        cutoff = self.placement.clock() - self.placement.config.unload_grace_s
        for version in [v for v, at in recent.items() if at < cutoff]:
            del recent[version]
        return set(recent)

    async def drain(self) -> None:
        """Wait for every action in progress."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _perform(
        self, pool: Pool, node_id: str, epoch: int | None, actions: list[Action]
    ) -> None:
        for action in actions:
            if pool.epoch(node_id) != epoch:
                return
            if isinstance(action, Evict):
                await self._evict(pool, node_id, action)
            else:
                self._spawn(self._load(pool, node_id, epoch, action))

    async def _evict(self, pool: Pool, node_id: str, action: Evict) -> None:
        handle = pool.handle(node_id)
        if handle is None:
            return
        ops = self.placement.ops.for_engine(handle)
        version_id = UUID(action.version_id)
        if action.tier is Tier.DISK:
            ops.discard(version_id)
            return
        if action.reason is EvictReason.RECONCILE:
            return  # the engine already dropped it; reconcile() released its folder
        self._unloaded.setdefault(node_id, {})[action.version_id] = self.placement.clock()
        try:
            await ops.unload(handle, version_id)
            self.unloads += 1
        except Exception as exc:  # the next reconcile sees it still loaded and evicts again
            log.warning("unloading %s from %s failed: %s", version_id, handle.name, exc)

    async def _load(self, pool: Pool, node_id: str, epoch: int | None, action: Load) -> None:
        handle = pool.handle(node_id)
        facts = self.placement.versions[action.version_id]
        if handle is None:
            return
        ops = self.placement.ops.for_engine(handle)
        started = self.placement.clock()
        try:
            if action.tier is Tier.DISK:
                found = await ops.fetch(handle, facts)
            else:
                found = await ops.load(handle, facts)
                self.loads += 1
        except Exception as exc:
            if pool.epoch(node_id) == epoch:
                self._failed(pool, node_id, action, exc)
            return
        seconds = self.placement.clock() - started
        rank_class = str(handle.max_lora_rank)  # made, whether or not its engine stayed
        metrics.observe_adapter_load(
            found.name.lower(), action.tier.name.lower(), rank_class, seconds
        )
        if found is Tier.COLD:
            self.placement.figures.fetched(action.version_id)
        if pool.epoch(node_id) != epoch:
            return  # a load into an engine incarnation that has since left: not its time
        if action.tier is Tier.LOADED:
            self._engine_loaded(handle, action.version_id, found, seconds)
        self._unloaded.get(node_id, {}).pop(action.version_id, None)
        now = self.placement.clock()
        after = pool.core.load_finished(node_id, action.version_id, action.tier, now)
        self.apply(pool, after)
        self.placement.dispatch(pool, node_id)

    def _engine_loaded(
        self, handle: EngineHandle, version_id: str, found: Tier, seconds: float
    ) -> None:
        """Remember how long an engine load took (the adapter page shows it); tell the
        watcher of a real one (not one already done)."""
        load = LoadTime(handle.name, found.name.lower(), seconds, datetime.now(UTC))
        self.load_times.record(version_id, load)
        if found is not Tier.LOADED:
            self.placement.figures.engine_load(version_id, seconds)
            self.placement.loaded(handle, UUID(version_id))

    def _failed(self, pool: Pool, node_id: str, action: Load, error: Exception) -> None:
        """Undo the load in the core; its waiting requests get the error."""
        log.warning("loading %s into %s failed: %s", action.version_id, action.tier.name, error)
        metrics.ADAPTER_LOADS.labels(action.tier.name.lower(), "error").inc()
        for request in pool.core.load_failed(node_id, action.version_id, action.tier):
            claim = pool.claims.pop(request.request_id, None)
            if claim is not None and not claim.abandoned and not claim.future.done():
                claim.future.set_exception(error)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)  # a reference, or the task may be collected mid-flight
        task.add_done_callback(self._tasks.discard)
