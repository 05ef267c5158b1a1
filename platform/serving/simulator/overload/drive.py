"""One run: a trace, an admission policy and the engine model, in one event loop.

Every request goes through the tenant's quota first (a refusal is a 429 and the policy
hears `QuotaRefused`), then the policy's `Arrival`; an admitted request goes to an engine,
whose first tokens and finishes go back to the policy. `Wait` decisions come back as a
`Tick` at their deadline, and the engines report their places and queue every
`REPORT_EVERY_S` (the live probe's interval).

A pool of several engines of one profile has a dispatcher like the live router's
(`EngineRouter.ordered` without placement): the engine with the fewest requests in flight,
ties to the first. A policy told each engine's places (`Places.engine_places`) hears, as the
live gate tells its core, which engine each request went to, with its first token.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from loraplex.gateway.admission.core import (
    Admit,
    Arrival,
    Decision,
    EngineReport,
    Event,
    Finished,
    FirstToken,
    PoolEngine,
    QuotaRefused,
    Routed,
    Shed,
    Tick,
)
from loraplex.serving.simulator.engine_model import EngineModel, EngineRequest
from loraplex.serving.simulator.engine_profile import EngineProfile
from loraplex.serving.simulator.overload.workload import QuotaBuckets, Trace

REPORT_EVERY_S = 2.0


class Policy(Protocol):
    """An admission policy: the core's events in, its decisions out."""

    def handle(self, event: Event) -> list[Decision]:
        """Apply one event; the decisions it makes."""
        ...


@dataclass(frozen=True, slots=True)
class Places:
    """What the engine report tells a policy: places and prefill places, and with
    `engine_places` each engine of the pool by name with that many places of its own."""

    places: int
    prefill_places: int | None = None
    engine_places: int | None = None


@dataclass(slots=True)
class Outcome:
    """Per request: when it was admitted and got its first token (NaN: never), and why a
    refused one was refused ("" for admitted)."""

    admitted_at: np.ndarray
    first_token_at: np.ndarray
    finished_at: np.ndarray
    refused: list[str]


def run(
    trace: Trace,
    profile: EngineProfile,
    policy: Policy,
    places: Places | None,
    engines: int = 1,
) -> Outcome:
    """Replay `trace` through `policy` onto a pool of `engines` engines of `profile`."""
    return _Run(trace, profile, policy, places, engines).loop()


def engine_name(index: int) -> str:
    """The name a pool's engine is reported by."""
    return f"engine-{index}"


class _Run:
    def __init__(
        self,
        trace: Trace,
        profile: EngineProfile,
        policy: Policy,
        places: Places | None,
        engines: int,
    ) -> None:
        self.trace, self.policy, self.places = trace, policy, places
        self.engines = [EngineModel(profile) for _ in range(max(1, engines))]
        self.in_flight = [0] * len(self.engines)  # sent and not finished, per engine
        self.engine_of: dict[int, int] = {}  # request -> its engine
        self.tells_engines = places is not None and places.engine_places is not None
        self.quotas = QuotaBuckets(trace.tenants)
        n = len(trace)
        self.out = Outcome(np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), [""] * n)
        self._ticks: list[tuple[float, int]] = []
        self._seq = itertools.count()

    def loop(self) -> Outcome:
        arrival = self.trace.arrival.tolist()
        i, total, next_report = 0, len(arrival), 0.0
        while True:
            next_arrival = arrival[i] if i < total else math.inf
            next_tick = self._ticks[0][0] if self._ticks else math.inf
            engine = min(self.engines, key=lambda e: e.step_ends_at)
            now = min(next_arrival, next_tick, engine.step_ends_at, next_report)
            if math.isinf(now):
                return self.out
            if now == next_report:
                self._report(now)
                busy = i < total or any(e.busy for e in self.engines) or self._ticks
                next_report = now + REPORT_EVERY_S if busy else math.inf
            elif now == engine.step_ends_at:
                for event in engine.end_step():
                    self._token(event.rid, event.at, first=event.first, finished=event.finished)
            elif now == next_tick:
                heapq.heappop(self._ticks)
                self._apply(self.policy.handle(Tick(now)), now)
            else:
                self._arrive(i, now)
                i += 1

    def _report(self, now: float) -> None:
        places = self.places.places if self.places else 0
        prefill = self.places.prefill_places if self.places else None
        named: tuple[PoolEngine, ...] = ()
        if self.places is not None and self.places.engine_places is not None:
            each = self.places.engine_places
            named = tuple(PoolEngine(engine_name(n), each) for n in range(len(self.engines)))
        running = sum(len(e.running) for e in self.engines)
        waiting = sum(len(e.waiting) for e in self.engines)
        report = EngineReport(places, now, prefill, running, waiting, named)
        self._apply(self.policy.handle(report), now)

    def _arrive(self, i: int, now: float) -> None:
        tenant_index = int(self.trace.tenant[i])
        tenant = self.trace.tenants[tenant_index]
        if not self.quotas.take(tenant_index, now):
            self.out.refused[i] = "quota"
            self._apply(self.policy.handle(QuotaRefused(tenant.name, now)), now)
            return
        arrival = Arrival(str(i), tenant.name, tenant.limits, int(self.trace.prompt[i]), now)
        self._apply(self.policy.handle(arrival), now)

    def _token(self, rid: int, at: float, *, first: bool, finished: bool) -> None:
        if first:
            self.out.first_token_at[rid] = at
            if self.tells_engines:  # as the live gate, with the first token
                routed = Routed(str(rid), engine_name(self.engine_of[rid]), at)
                self._apply(self.policy.handle(routed), at)
            self._apply(self.policy.handle(FirstToken(str(rid), at)), at)
        if finished:
            self.out.finished_at[rid] = at
            self.in_flight[self.engine_of.pop(rid)] -= 1
            self._apply(self.policy.handle(Finished(str(rid), at)), at)

    def _apply(self, decisions: list[Decision], now: float) -> None:
        for decision in decisions:
            if isinstance(decision, Admit):
                rid = int(decision.request_id)
                self.out.admitted_at[rid] = now
                request = EngineRequest(
                    rid, int(self.trace.prompt[rid]), int(self.trace.output[rid])
                )
                self._dispatch(request, now)
            elif isinstance(decision, Shed):
                self.out.refused[int(decision.request_id)] = decision.reason
            else:
                heapq.heappush(self._ticks, (decision.until, next(self._seq)))

    def _dispatch(self, request: EngineRequest, now: float) -> None:
        """To the engine with the fewest requests in flight, ties to the first (the live
        router's order)."""
        index = min(range(len(self.engines)), key=lambda n: (self.in_flight[n], n))
        self.in_flight[index] += 1
        self.engine_of[request.rid] = index
        self.engines[index].submit(request, now)
