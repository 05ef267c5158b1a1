"""The gateway's admission step: a place on the engines, then the tenant's quotas in Redis.

`EngineGate.admit` returns one `AdmissionHandle` per admitted request, which the request
holds from its start to its end (`async with`): its rate-limit headers, its first token and
its end all go through it. The decisions (admit now, wait for a place, shed with 503 +
Retry-After) are the admission core's (`admission.core`): one core per base model over the
places of the engines serving it (`admission.places`), driven here by the event loop's
clock, and by the simulator with the same code. Where every engine of the pool has the same
calibrated profile, the core is told each engine by name and hears, with each first token,
which engine the request went to: it predicts the TTFT on the engine the router would pick.
This module only turns the core's decisions into awaits, refusals and metrics.

Quotas stay in Redis (`TenantQuotas`), asked only once the core has given a place, so a
request shed for load spends no quota. A request about to be shed is first checked against
its own quota: a tenant over it gets its 429, which says more than the engines' 503, and the
core hears that the tenant offers more than its plan allows (`QuotaRefused`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from prometheus_client import Gauge

from loraplex.control.quotas import Quotas
from loraplex.gateway.admission import OverloadShedder, TenantQuotas
from loraplex.gateway.admission.core import (
    OVER_CONCURRENCY,
    AdmissionCore,
    Admit,
    Arrival,
    CoreConfig,
    Decision,
    EngineReport,
    Event,
    Finished,
    FirstToken,
    PlanLimits,
    PoolEngine,
    QuotaRefused,
    Routed,
    Shed,
    Tick,
    Wait,
)
from loraplex.gateway.admission.demand import RankClassDemand
from loraplex.gateway.admission.errors import Overloaded, RateLimited
from loraplex.gateway.admission.handle import AdmissionHandle
from loraplex.gateway.admission.places import PlaceBook
from loraplex.gateway.admission.refusals import concurrency_refusal
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.observability.metrics import (
    ADMISSION_IN_FLIGHT,
    ADMISSION_PLACES,
    ADMISSION_REJECTIONS,
    ADMISSION_WAITING,
    TenantLabeler,
)
from loraplex.serving.registry import EngineHandle

# Without a profile, a tenant below its share waits this long for a place (it is next in
# line, so one frees within it unless the engine stalls), one at or over its share this long.
DEFAULT_MAX_WAIT_S = 0.1
DEFAULT_BUSY_WAIT_S = 0.005


def _default_config() -> CoreConfig:
    return CoreConfig(max_wait_s=DEFAULT_MAX_WAIT_S, busy_wait_s=DEFAULT_BUSY_WAIT_S)


def plan_limits(quotas: Quotas) -> PlanLimits:
    """What admission's core reads of a tenant's quotas."""
    return PlanLimits(
        priority=quotas.priority or 0,
        requests_per_minute=quotas.requests_per_minute,
        concurrent_requests=quotas.concurrent_requests,
    )


@dataclass(frozen=True, slots=True)
class PoolView:
    """One base model's admission as the engines page and the API show it."""

    base_model: str
    places: int
    prefill_places: int | None
    in_flight: int
    waiting: int
    shares: dict[str, float]  # tenant id -> its fair share of the places now
    slo_ms: float | None  # the TTFT the waits are cut to (None: none known)


@dataclass(frozen=True, slots=True)
class EngineAdmission:
    """One engine's part in its pool: its own places and where they came from."""

    places: int
    prefill_places: int | None
    source: str
    pool: PoolView


@dataclass
class _Pool:
    """One base model's core, and the requests of this process waiting on it."""

    base_model: str
    core: AdmissionCore
    turns: dict[str, asyncio.Future[Decision]] = field(default_factory=dict)
    reported: _Sized | None = None
    gauges: tuple[Gauge, Gauge, Gauge] | None = None  # places, in flight, waiting (labelled)


@dataclass(frozen=True, slots=True)
class _Sized:
    """What a pool's core is told: places, prefill places and, where it predicts per
    engine, each engine with its places (in the router's order of ties)."""

    places: int
    prefill_places: int | None
    engines: tuple[PoolEngine, ...] = ()


class EngineGate:
    """Admits requests for a place on the engines, then within the tenant's quotas; a gate
    without quotas checks places only."""

    def __init__(
        self,
        quotas: TenantQuotas | None,
        shedder: OverloadShedder | None,
        router: EngineRouter,
        places: PlaceBook | None = None,
        labeler: TenantLabeler | None = None,
        *,
        busy_wait_s: float = 0.0,  # 0: from the profile (`_sized`)
        ttft_slo_s: float = 0.0,  # 0: from the profile
    ):
        self.quotas, self.shedder, self.router = quotas, shedder, router
        self.places = places or PlaceBook()
        self.labeler = labeler or TenantLabeler()
        self.busy_wait_s, self.ttft_slo_s = busy_wait_s, ttft_slo_s
        self.demand = RankClassDemand(router.registry)  # per-rank-class series, for autoscaling
        self._pools: dict[str, _Pool] = {}

    # -- the request's way in -------------------------------------------------------------

    async def admit(
        self,
        tenant_id: UUID,
        limits: Quotas,
        request_id: str,
        *,
        stream: bool,
        target: Target,
        prompt_tokens: int,
        max_tokens: int,
    ) -> AdmissionHandle:
        """The request's handle once it has a place and its quotas admit it; otherwise the
        refusal (429 or 503 with Retry-After) is raised."""
        pool = self._pool(target)
        rank_class = self.demand.class_of(target)
        arrival = Arrival(request_id, str(tenant_id), plan_limits(limits), prompt_tokens, _now())
        try:
            with self.demand.waiting(rank_class):
                if not self.places.off:  # admission off: no place to wait for
                    await self._place(pool, arrival)
        except Overloaded as shed:
            await self._refuse_if_over_quota(
                pool, tenant_id, limits, stream, prompt_tokens + max_tokens
            )
            ADMISSION_REJECTIONS.labels(shed.reason, self.labeler(tenant_id)).inc()
            self.demand.shed(rank_class, shed.reason)
            raise
        handle = AdmissionHandle(self, pool.base_model, request_id, rank_class)
        self.demand.entered(rank_class)  # in flight until the handle ends
        if self.quotas is None:
            self.demand.admitted(rank_class)
            return handle
        try:
            with self._heard_if_over_quota(pool, tenant_id):
                handle.ticket = await self.quotas.admit(
                    tenant_id,
                    limits,
                    request_id=request_id,
                    stream=stream,
                    estimated_tokens=prompt_tokens + max_tokens,
                    estimated_ttft_s=self.estimate_ttft_s(target, prompt_tokens),
                )
        except BaseException as refused:
            handle.free_place()
            if isinstance(refused, Overloaded):  # the TTFT estimate's shedding
                self.demand.shed(rank_class, refused.reason)
                # over its own quota, the tenant hears that (429) rather than the 503
                tokens = prompt_tokens + max_tokens
                await self._refuse_if_over_quota(pool, tenant_id, limits, stream, tokens)
            raise
        self.demand.admitted(rank_class)
        return handle

    async def _place(self, pool: _Pool, arrival: Arrival) -> None:
        """Return once the core admits `arrival`; raise `Overloaded` if it sheds it."""
        mine = self._decide(pool, arrival, arrival.request_id)
        if mine is None:
            turn = pool.turns[arrival.request_id] = asyncio.get_running_loop().create_future()
            try:
                mine = await turn
            except asyncio.CancelledError:
                pool.turns.pop(arrival.request_id, None)
                self._handle(pool, Finished(arrival.request_id, _now()))  # if let in meanwhile
                raise
        if isinstance(mine, Shed) and mine.reason == OVER_CONCURRENCY:
            raise self._over_concurrency(arrival)
        if isinstance(mine, Shed):
            raise Overloaded(f"{max(1, round(mine.retry_after_s))}", reason=mine.reason)

    def _over_concurrency(self, arrival: Arrival) -> RateLimited:
        """The quota's 429 for a tenant already running all its plan allows here: its
        leases may not all be in Redis yet, so the quota itself could not be asked."""
        held = arrival.limits.concurrent_requests or 0
        if self.quotas is not None:
            return self.quotas.over_concurrency(arrival.tenant, held)
        return concurrency_refusal(held, lambda reason, tenant: None, arrival.tenant)

    def _decide(self, pool: _Pool, event: Event, request_id: str) -> Decision | None:
        """Apply `event`; the decision about `request_id` if one was made now (a Wait is
        none: the request hears on its turn)."""
        found: Decision | None = None
        for decision in self._handle(pool, event, keep=request_id):
            found = decision
        return found

    def _handle(self, pool: _Pool, event: Event, keep: str = "") -> list[Decision]:
        """Feed the core one event and carry out its decisions: wake the requests it admits
        or sheds, set a timer for each wait. Decisions about `keep` are returned instead."""
        kept: list[Decision] = []
        for decision in pool.core.handle(event):
            if isinstance(decision, Wait):
                if decision.request_id != keep:
                    continue  # already waiting: its timer is set
                asyncio.get_running_loop().call_at(decision.until, self._tick, pool)
                continue
            if decision.request_id == keep:
                kept.append(decision)
                continue
            turn = pool.turns.pop(decision.request_id, None)
            if turn is not None and not turn.done():
                turn.set_result(decision)
            elif isinstance(decision, Admit):  # its request is gone: the place goes back
                self._handle(pool, Finished(decision.request_id, _now()))
        self._publish(pool)
        return kept

    def _tick(self, pool: _Pool) -> None:
        self._handle(pool, Tick(_now()))

    async def _refuse_if_over_quota(
        self, pool: _Pool, tenant_id: UUID, limits: Quotas, stream: bool, tokens: int
    ) -> None:
        """A tenant over its own quota gets the 429 rather than the engines' 503."""
        if self.quotas is None:
            return
        with self._heard_if_over_quota(pool, tenant_id):
            await self.quotas.refuse_if_over_quota(
                tenant_id, limits, stream=stream, estimated_tokens=tokens
            )

    @contextlib.contextmanager
    def _heard_if_over_quota(self, pool: _Pool, tenant_id: UUID) -> Iterator[None]:
        """Tell the core when a tenant's own quota refuses it: it offers more than its plan
        allows, and its surplus is shed first."""
        try:
            yield
        except RateLimited:
            self._handle(pool, QuotaRefused(str(tenant_id), _now()))
            raise

    # -- the request's way through (called by its handle) ---------------------------------

    def first_token(
        self,
        base_model: str,
        request_id: str,
        rank_class: str,
        ttft_s: float,
        engine_id: str | None = None,
    ) -> None:
        """The request's first token came (from `engine_id`, when known: the core moves the
        request there if it expected another engine)."""
        pool = self._pools[base_model]
        if engine_id is not None:
            self._handle(pool, Routed(request_id, engine_id, _now()))
        self._handle(pool, FirstToken(request_id, _now()))
        slo = pool.core.config.ttft_slo_s
        self.demand.first_token(rank_class, ttft_s, slo if slo > 0 else None)

    def finished(self, base_model: str, request_id: str, rank_class: str) -> None:
        self._handle(self._pools[base_model], Finished(request_id, _now()))
        self.demand.ended(rank_class)

    def observe(
        self, engine_id: str | None, service_s: float, prompt_tokens: int, ttft_s: float | None
    ) -> None:
        """A finished request's timings, for the TTFT estimate of `TenantQuotas`' shedding."""
        if engine_id is not None and self.shedder is not None:
            self.shedder.observe(
                engine_id, service_s=service_s, prompt_tokens=prompt_tokens, prefill_s=ttft_s or 0.0
            )

    # -- pools ----------------------------------------------------------------------------

    def _pool(self, target: Target) -> _Pool:
        """The pool of `target`'s base model, told the places of the engines serving it now."""
        pool = self._pools.get(target.base_model)
        if pool is None:
            core = AdmissionCore(CoreConfig())
            pool = self._pools[target.base_model] = _Pool(target.base_model, core)
        engines = self.router.ordered(target)
        if not engines:
            return pool
        sized, config = self._sized(self._in_router_order(target, engines))
        if sized != pool.reported or config != pool.core.config:
            pool.reported, pool.core.config = sized, config
            running = sum(e.engine_load.running for e in engines if e.engine_load)
            waiting = sum(e.engine_load.waiting for e in engines if e.engine_load)
            report = EngineReport(
                sized.places,
                _now(),
                sized.prefill_places,
                int(running),
                int(waiting),
                sized.engines,
            )
            self._handle(pool, report)
        return pool

    def _in_router_order(self, target: Target, engines: list[EngineHandle]) -> list[EngineHandle]:
        """`engines` in the order the router breaks ties in (the registry's)."""
        order = {e.id: i for i, e in enumerate(self.router.registry.candidates(target.base_model))}
        return sorted(engines, key=lambda e: order.get(e.id, len(order)))

    def _sized(self, engines: list[EngineHandle]) -> tuple[_Sized, CoreConfig]:
        """What the core of a pool of `engines` is told, and its bounds. Engines that all
        have the same profile's TTFT model are told each with what it holds, and the model
        paces each (a lone engine is told whole, as one engine of its places); otherwise the
        engines' places add up, paced by their prefill places. The settings' SLO and wait,
        when set, override the profile's."""
        each = [self.places.of(e) for e in engines]
        paced = {p.paced_config for p in each}
        config = next(iter(paced))
        if len(paced) == 1 and config is not None:
            named = tuple(
                PoolEngine(e.id, p.holds, e.max_lora_rank)
                for e, p in zip(engines, each, strict=True)
            )
            sized = _Sized(sum(p.holds for p in each), None, named if len(named) > 1 else ())
        else:
            places = sum(p.places for p in each)
            known = [p.prefill_places for p in each]
            sized = _Sized(places, None if None in known else sum(p or 0 for p in known))
            profiled = [p.config for p in each if p.config is not None]
            config = profiled[0] if len(profiled) == len(each) else _default_config()
        changes: dict[str, float] = {}
        if self.ttft_slo_s > 0:
            changes["ttft_slo_s"] = self.ttft_slo_s
        if self.busy_wait_s > 0:
            changes["busy_wait_s"] = self.busy_wait_s
        return sized, dataclasses.replace(config, **changes)

    def _publish(self, pool: _Pool) -> None:
        if pool.gauges is None:  # labelled once: a labels() lookup per event added up
            model = pool.base_model
            pool.gauges = (
                ADMISSION_PLACES.labels(model),
                ADMISSION_IN_FLIGHT.labels(model),
                ADMISSION_WAITING.labels(model),
            )
        places, in_flight, waiting = pool.gauges
        places.set(pool.core.places)
        in_flight.set(pool.core.in_flight)
        waiting.set(pool.core.waiting())

    def pool_view(self, base_model: str) -> PoolView | None:
        """What admission holds for `base_model` in this process (None: no request yet)."""
        pool = self._pools.get(base_model)
        if pool is None:
            return None
        slo = pool.core.config.ttft_slo_s
        return PoolView(
            base_model,
            pool.core.places,
            pool.core.prefill_places,
            pool.core.in_flight,
            pool.core.waiting(),
            dict(pool.core.shares()),
            round(slo * 1000, 1) if slo > 0 else None,
        )

    def engine_view(self, engine: EngineHandle) -> EngineAdmission | None:
        """One engine's places and its pool (None: its base model has had no request here)."""
        pool = self.pool_view(engine.base_model)
        if pool is None:
            return None
        places = self.places.of(engine)
        return EngineAdmission(places.places, places.prefill_places, places.source, pool)

    def estimate_ttft_s(self, target: Target, prompt_tokens: int) -> float | None:
        """The TTFT a new request for `target` would see now, from the engines' load."""
        if self.shedder is None:
            return None
        engines = self.router.ordered(target)
        if not engines:
            return None
        parallelism = self.places.parallelism
        loads = [
            self.shedder.load(e.id, in_flight=e.in_flight, queued=0, parallelism=parallelism)
            for e in engines
        ]
        return self.shedder.estimate_s(loads, prompt_tokens)


def _now() -> float:
    """The event loop's clock (monotonic), which the core's times and the wait timers share."""
    return asyncio.get_running_loop().time()


def headers_of(handle: Any) -> dict[str, str]:
    """The `x-ratelimit-*` headers of an admitted request (none without quotas)."""
    return handle.headers if handle is not None else {}
