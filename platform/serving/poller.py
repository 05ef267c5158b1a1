"""Probing engines: one health check (plus a fresh adapter list) per engine per round.

The poller is the I/O around `loraplex.serving.health`: it calls the drivers, feeds the
outcomes to each engine's `HealthTracker`, and writes state changes (and a throttled
heartbeat) to the engine's database row. For an engine whose agent reports its health
(`reported_healthy`), the health check is that report: the engine's own health route (on
SGLang a one-token generation) is called by its agent alone, not by every API process;
here only the cheap calls remain (adapter list, queue gauges), and their failing still
counts, so a host that dies with its agent leaves rotation as fast as before. An engine no
agent reports on gets its health route only every `health_route_every_s`; the rounds
between make the cheap calls alone (an engine that stops answering fails those too).

Before an engine first enters rotation, and again each time it comes back after leaving it
(a restart may bring other flags), the poller asks it what it was started with and holds
its registration against that (facts_check.py): an engine that was silent when registered,
or restarted on another model or with other slots, stays out, with the reason logged once
and shown as its `last_error`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import Engine, EngineStatus
from loraplex.serving.engines.facts_check import Problem, problems
from loraplex.serving.health import HealthRule, HealthTracker, HeartbeatSchedule, Transition

if TYPE_CHECKING:
    from loraplex.serving.engines import EngineLoad
    from loraplex.serving.registry import EngineHandle

log = logging.getLogger("loraplex.serving.poller")

#: Opens a database session: `async with factory() as session`.
SessionFactory = Callable[[], Any]


class HealthPoller:
    """Probes engines and keeps each handle's `healthy`, `loaded` and `last_error` current."""

    def __init__(
        self,
        *,
        rule: HealthRule | None = None,
        probe_timeout_s: float = 5.0,
        heartbeat_every_s: float = 30.0,
        session_factory: SessionFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        health_route_every_s: float = 0.0,
    ) -> None:
        self.rule = rule or HealthRule()
        self.probe_timeout_s = probe_timeout_s
        self.health_route_every_s = health_route_every_s  # 0: every round
        self._health_route_at: dict[str, float] = {}
        self.session_factory = session_factory
        self.clock = clock
        self.heartbeats = HeartbeatSchedule(heartbeat_every_s)
        self._trackers: dict[str, HealthTracker] = {}

    async def poll(self, handles: Iterable[EngineHandle]) -> None:
        """Probe every engine concurrently, so one slow engine does not delay the others."""
        await asyncio.gather(*(self.probe(handle) for handle in handles))

    async def probe(self, handle: EngineHandle) -> Transition | None:
        """Probe one engine and apply the outcome; never raises."""
        ok, detail = await self._check(handle)
        tracker = self._tracker(handle.id)
        # Facts that disagree take it out at once, not after `failures_to_unhealthy` rounds.
        transition = tracker.force_down() if handle.facts_mismatch else tracker.observe(ok)
        handle.healthy = tracker.healthy
        if transition is Transition.DOWN:
            handle.facts_confirmed = None  # ask again when it comes back
        handle.last_error = "" if ok else detail
        if transition is not None:
            log.warning("engine %s is %s: %s", handle.name, transition, detail or "answering")
        await self._persist(handle, transition)
        return transition

    async def force_down(self, handle: EngineHandle, reason: str) -> None:
        """Take an engine out of rotation now, e.g. after it failed a live request."""
        transition = self._tracker(handle.id).force_down()
        handle.healthy = False
        handle.last_error = reason
        handle.facts_confirmed = None
        if transition is not None:
            log.warning("engine %s taken out of rotation: %s", handle.name, reason)
            await self._persist(handle, transition)

    def forget(self, engine_id: str) -> None:
        """Drop the state of an engine that left the registry."""
        self._trackers.pop(engine_id, None)
        self._health_route_at.pop(engine_id, None)
        self.heartbeats.forget(engine_id)

    async def _check(self, handle: EngineHandle) -> tuple[bool, str]:
        """(answering, why not): a health probe, then the adapter list if it answered."""
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                if handle.reported_healthy is None and self._health_route_due(handle):
                    health = await handle.driver.health()
                    if not health.healthy:
                        return False, health.detail or "engine reports not ready"
                elif handle.reported_healthy is False:
                    return False, "its agent reports the engine not answering"
                if handle.facts_confirmed != handle.claim:
                    claim = handle.claim
                    found = problems(claim, await handle.driver.reported_facts())
                    if found:  # registered while it was down, or restarted with other flags
                        return False, self._facts_mismatch(handle, found)
                    handle.facts_confirmed, handle.facts_mismatch = claim, ""
                before = set(handle.loaded)
                self._refresh_loaded(handle, await handle.driver.list_loaded(), before)
                handle.engine_load = await self._queue_depth(handle)
        except TimeoutError:
            return False, f"no answer within {self.probe_timeout_s:g} s"
        except Exception as exc:  # a probe must never kill the poller
            return False, f"{type(exc).__name__}: {exc}"
        return True, ""

    @staticmethod
    def _facts_mismatch(handle: EngineHandle, found: list[Problem]) -> str:
        """Note why the engine's own facts keep it out; log it when the reason is new."""
        reason = "its registration disagrees with the engine: " + "; ".join(
            f"{p.param}: {p.message}" for p in found
        )
        if reason != handle.facts_mismatch:
            log.warning("engine %s kept out of rotation: %s", handle.name, reason)
        handle.facts_mismatch = reason
        return reason

    def _health_route_due(self, handle: EngineHandle) -> bool:
        """Whether to call the engine's health route this round (on SGLang a generation).
        An engine out of rotation is checked every round, so it comes back at once."""
        now, last = self.clock(), self._health_route_at.get(handle.id)
        if handle.healthy and last is not None and now - last < self.health_route_every_s:
            return False
        self._health_route_at[handle.id] = now
        return True

    @staticmethod
    async def _queue_depth(handle: EngineHandle) -> EngineLoad | None:
        """The engine's own running/queued gauges; None when it serves no metrics."""
        try:
            return await handle.driver.queue_depth()
        except Exception:  # metrics are informative: an engine without them is still up
            return None

    @staticmethod
    def _refresh_loaded(handle: EngineHandle, reported: set[str], before: set[str]) -> None:
        """Adopt the engine's own adapter list (a restarted engine reports an empty one).

        A load that finished while `list_loaded` was in flight may be missing from the
        engine's answer; keep names the loader added since the call started, or the next
        request for that adapter would load it a second time. Likewise an unload that
        finished meanwhile may still be in the answer; names removed since stay removed.
        """
        added, removed = handle.loaded - before, before - handle.loaded
        handle.loaded = (reported - removed) | added

    def _tracker(self, engine_id: str) -> HealthTracker:
        tracker = self._trackers.get(engine_id)
        if tracker is None:
            tracker = self._trackers[engine_id] = HealthTracker(self.rule)
        return tracker

    async def _persist(self, handle: EngineHandle, transition: Transition | None) -> None:
        """Write a state change, or a heartbeat when one is due; DB errors are only logged."""
        if self.session_factory is None or not handle.persisted:
            return
        now = self.clock()
        heartbeat_due = handle.healthy and self.heartbeats.due(handle.id, now)
        if transition is None and not heartbeat_due:
            return
        values: dict[str, Any] = {
            "status": EngineStatus.HEALTHY if handle.healthy else EngineStatus.UNHEALTHY
        }
        if handle.healthy:
            values["last_heartbeat_at"] = datetime.now(UTC)
            self.heartbeats.written(handle.id, now)
        try:
            async with self.session_factory() as session:
                await _update_engine(session, UUID(handle.id), values)
        except Exception as exc:  # the database being down must not stop health checks
            log.warning("could not record health of engine %s: %s", handle.name, exc)


async def _update_engine(session: AsyncSession, engine_id: UUID, values: dict[str, Any]) -> None:
    await session.execute(update(Engine).where(Engine.id == engine_id).values(**values))
    await session.commit()
