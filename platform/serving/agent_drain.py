"""Draining a node's engine before it stops: the agent's `POST /drain`.

A pod's preStop hook calls `http://127.0.0.1:8200/drain` from the engine's container before
the kubelet sends SIGTERM. The agent tells the API at once that the engine is draining (a
heartbeat with `draining: true`), so every API process stops sending it new requests and
re-places its pinned and hot adapters elsewhere; then it waits until the engine itself
reports nothing running or waiting (its `/metrics` or `/v1/loads`), or until `wait_s`
passed, and answers. The engine then gets SIGTERM with no stream left to cut. The API moves
the engine's streams that can be continued exactly to another engine as soon as it hears of
the drain (gateway/failover.py, `move_off_draining`), so the wait is for the move and for
the streams that cannot move, not for every answer to end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from loraplex.serving.agent_registration import Registrar
from loraplex.serving.registry import EngineHandle

log = logging.getLogger("loraplex.agent")

POLL_S = 0.25
# A request an API process dispatched just before it heard of the drain may reach the engine
# a moment later: the engine must read idle this many times in a row, POLL_S apart.
IDLE_READS = 3


@dataclass(frozen=True)
class DrainOutcome:
    """How a drain ended: `drained` when the engine had nothing in flight."""

    drained: bool
    announced: bool  # the API took the drain (False: unreachable, or no registrar)
    in_flight: float  # running + waiting on the engine at the last read (-1: unreadable)
    waited_s: float


class Drainer:
    """Announces the drain through the registrar, then waits for the engine to idle."""

    def __init__(
        self,
        handle: EngineHandle,
        registrar: Registrar | None,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float = POLL_S,
    ) -> None:
        self.handle, self.registrar, self.clock, self.poll_s = handle, registrar, clock, poll_s

    async def drain(self, wait_s: float) -> DrainOutcome:
        """Stop new requests coming here; return once the engine idles or `wait_s` passed."""
        started = self.clock()
        announced = False
        if self.registrar is not None:
            announced = await self.registrar.start_draining()
            log.warning("draining engine (announced to the API: %s)", announced)
        idle_reads, in_flight = 0, -1.0
        while True:
            in_flight = await self._in_flight()
            idle_reads = idle_reads + 1 if in_flight == 0 else 0
            waited_s = self.clock() - started
            if idle_reads >= IDLE_READS or waited_s >= wait_s:
                return DrainOutcome(idle_reads >= IDLE_READS, announced, in_flight, waited_s)
            await asyncio.sleep(min(self.poll_s, max(0.0, wait_s - waited_s)))

    async def _in_flight(self) -> float:
        """Running + waiting on the engine; an engine that does not answer has none left."""
        try:
            load = await self.handle.driver.queue_depth()
        except Exception as exc:  # stopped, or no metrics: nothing more will finish there
            log.info("engine queue unreadable while draining: %s", exc)
            return 0.0 if not await self._answers() else -1.0
        in_flight: float = load.running + load.waiting
        return in_flight

    async def _answers(self) -> bool:
        try:
            health = await self.handle.driver.health()
        except Exception:
            return False
        healthy: bool = health.healthy
        return healthy
