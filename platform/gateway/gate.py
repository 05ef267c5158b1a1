"""The gateway's admission step: quotas and rate limits in Redis, and overload shedding.

Before a request touches an engine, the gate checks two load signals and then asks
`TenantQuotas` to admit it within the tenant's limits:
- a per-engine in-flight cap (`max_in_flight`) for engines like vLLM on CPU that run every
  request at once, so TTFT grows with concurrency rather than with a queue;
- the TTFT estimate from queueing behind `parallelism` batch slots (in flight x measured
  service time, plus prefill), for engines with a fixed batch (SGLang's slots).
Lower priority classes are shed first. After the request, the measured service time is fed
back so the estimate follows the engines' real speed.

The cap counts requests from the moment they pass the check (synchronously, before any
await) until they end: counting only requests already running on an engine let a burst of
arrivals all pass the check during the awaits in between and overshoot the cap, which is
what kept admitted TTFT high under 2x load. A request that finds the cap reached waits up
to `queue_wait_s` for a place and is shed only then, so the engine is not left idle between
arrivals.

The cap is per engine and adapts by itself (`admission.engine_cap`, a gradient on the
median TTFT against a target, starting from `parallelism` or the engine's batch slots if
more); `max_in_flight`, when set, is its ceiling, and without adaptation the fixed cap.
Places under the cap are shared fairly across tenants (`admission.fair_share`, weighted by
plan priority and requests-per-minute quota): a freed place goes to the waiting tenant
furthest below its weighted share, and a tenant below its share goes in past the cap while
another tenant holds more than its own, so a flood from one tenant never refuses another
within its quota. A request about to be shed is first checked against its own quota: a
tenant over it gets its 429, not the engines' 503.

For a tenant the cap has just shed (it offers more than the engines take), the gate also
limits how many requests wait for their first token on the engines at once (`admission.burst_limit`,
learned per engine from the bursts seen too slow): the cap does not stop several requests
that arrive within a few milliseconds while there is room under it, and the engine
prefills them together, each as slow as the lot. A tenant below its fair share of those
places still goes in.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from loraplex.gateway.admission import OverloadShedder, TenantQuotas, Ticket
from loraplex.gateway.admission.burst_limit import BurstLimit
from loraplex.gateway.admission.engine_cap import (
    DEFAULT_CEILING,
    WARM_WITHIN_S,
    AdaptiveCap,
)
from loraplex.gateway.admission.errors import Overloaded, RateLimited
from loraplex.gateway.admission.fair_share import (
    Claim,
    fair_shares,
    may_borrow,
    neediest,
    weight_of,
)
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.observability.metrics import (
    ADMISSION_REJECTIONS,
    ENGINE_BURST_LIMIT,
    ENGINE_CAP_CUTS,
    ENGINE_CAP_TAIL_TARGET,
    ENGINE_CAP_TARGET,
    ENGINE_IN_FLIGHT_CAP,
    TenantLabeler,
)
from loraplex.serving.registry import EngineHandle

# An engine running `cap x share` requests refuses a request of that priority: the lowest
# class is shed first, the highest may use a little headroom past the cap.
PRIORITY_SHARE = (0.8, 1.0, 1.2)
LIGHT_WAIT_S = 0.1  # a tenant below its share waits at least this long for a place
# A tenant the cap shed this recently offers more than the engines take, and one its own
# quota refused this recently more than its plan allows: the bursts of either past the
# engines' burst limits are shed too (beside a light tenant, one sending 5x its quota's
# rate, refused by its quota and never by the cap, shared its admitted requests' prefills
# with the light tenant's and made its p99 1.36x alone). A tenant refused by neither is never
# refused for a burst: its parallel calls on a quiet platform, or its Poisson bursts beside
# a busy engine (a limit on any engine running half its cap refused a light tenant alone,
# after a 4x phase had left the cap at 5: docs/admission.md, "Bursts that share a prefill").
HEAVY_FOR_S = 1.0


def in_flight_allowance(cap: int, priority: int) -> int:
    """How many requests an engine may have in flight for a request of `priority` to start."""
    share = PRIORITY_SHARE[min(max(priority, 0), len(PRIORITY_SHARE) - 1)]
    return max(1, round(cap * share))


TenantKey = tuple[str, UUID | None]  # (base model, tenant)


@dataclass(slots=True)
class _Entry:
    """What the gate knew when it let a request in, for the cap to learn from its TTFT."""

    at: float  # monotonic
    # nothing else ran for its model when it came, something did just before (it is warm),
    # and nothing else was admitted before its first token (`_lone`)
    idle: bool
    at_cap: bool  # the cap was (nearly) reached
    prompt_tokens: int  # as estimated at admission
    tenant: TenantKey
    peak: int = 1  # the most requests waiting for a first token at once in its wait, itself too
    learned: bool = False  # its first token was handled: fed to the cap, or dropped if cold
    cold: bool = False  # nothing had run for its model for `WARM_WITHIN_S`: not a signal


class EngineGate:
    """Admits requests against quotas and load; a gate without quotas admits everything."""

    def __init__(
        self,
        quotas: TenantQuotas | None,
        shedder: OverloadShedder | None,
        router: EngineRouter,
        parallelism: int,
        max_in_flight: int = 0,
        labeler: TenantLabeler | None = None,
        queue_wait_s: float = 0.0,
        *,
        adaptive: bool = False,
        ttft_slo_s: float = 0.0,
    ):
        self.quotas, self.shedder, self.router = quotas, shedder, router
        self.parallelism, self.max_in_flight = parallelism, max_in_flight
        self.labeler, self.queue_wait_s = labeler or TenantLabeler(), queue_wait_s
        self.adaptive, self.ttft_slo_s = adaptive, ttft_slo_s
        self.caps: dict[str, AdaptiveCap] = {}  # engine id -> its cap (adaptive only)
        self.bursts: dict[str, BurstLimit] = {}  # engine id -> its burst limit (adaptive only)
        self._admitted: Counter[str] = Counter()  # per base model: admitted, not yet ended
        self._running: Counter[TenantKey] = Counter()  # the same, per tenant
        self._claims: dict[TenantKey, Claim] = {}  # each tenant's weight and bound, by model
        self._waiters: defaultdict[str, list[_Waiter]] = defaultdict(list)  # arrival order
        self._entries: dict[str, _Entry] = {}  # request id -> when and how it was let in
        # base model -> its admitted requests with no first token yet (request id -> entry)
        self._prefilling: defaultdict[str, dict[str, _Entry]] = defaultdict(dict)
        # when the cap, or the tenant's own quota, last refused each tenant
        self._refused_at: dict[TenantKey, float] = {}
        self._quiet_since: dict[str, float] = {}  # base model -> when its last request ended
        self._lone: dict[str, _Entry] = {}  # base model -> its last idle request's entry
        self._probes: dict[str, int] = {}  # engine id -> the number of the probe its cap saw
        # engine id -> its cap's cuts by reason that the metrics have counted
        self._counted_cuts: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def shed_if_saturated(self, target: Target, priority: int, tenant_id: UUID) -> None:
        """503 + Retry-After when every candidate engine is at the in-flight cap for `priority`
        and the tenant has no fair share left to claim past it."""
        if not self._saturated(target, priority) or self._may_borrow(target, tenant_id):
            return
        if self._raise_a_cap_with_room(target) and not self._saturated(target, priority):
            return
        raise Overloaded("1", reason="engine_concurrency")

    def _raise_a_cap_with_room(self, target: Target) -> bool:
        """Raise the cap of one of `target`'s engines that has clear room (its median TTFT
        near idle) by one, rather than shed a request at it; whether one was raised."""
        for engine in self.router.ordered(target):
            cap = self.caps.get(engine.id)
            if cap is not None and cap.raise_for_room():
                _publish_cap(engine.id, cap, engine)
                return True
        return False

    async def wait_for_room(self, target: Target, priority: int, tenant_id: UUID) -> None:
        """Return once `target` is under the cap for `priority` (or the tenant is below its
        fair share while another is above), or shed after the tenant's wait.

        A tenant below its fair share waits longer (`_light_wait_s`) than one at or above
        it (`queue_wait_s`): it gets the next place freed (`_leave`), so it is admitted as
        soon as one request ends, while the heavy tenant's surplus is shed first. A heavy
        tenant's wait is short because it is added to the TTFT of what it admits.
        """
        waiters = self._waiters[target.base_model]
        if not waiters and not self._saturated(target, priority):
            return  # the common case: no fair-share arithmetic on the way in
        if self._may_borrow(target, tenant_id):
            return
        below = self._below_share(target, tenant_id)
        wait_s = max(self._light_wait_s(target), self.queue_wait_s) if below else self.queue_wait_s
        if wait_s <= 0:
            self.shed_if_saturated(target, priority, tenant_id)
            return
        deadline = asyncio.get_running_loop().time() + wait_s
        waiter = _Waiter(tenant_id)
        while True:
            waiter.turn = asyncio.get_running_loop().create_future()
            waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter.turn
            except TimeoutError:
                self.shed_if_saturated(target, priority, tenant_id)
                return  # room appeared at the last moment
            finally:
                if waiter in waiters:
                    waiters.remove(waiter)
            if not self._saturated(target, priority) or self._may_borrow(target, tenant_id):
                return

    def cap_of(self, engine: EngineHandle) -> int:
        """The in-flight cap of one engine now (0: none)."""
        if not self.adaptive:
            return max(0, self.max_in_flight)
        cap = self.caps.get(engine.id)
        if cap is None:
            ceiling = self.max_in_flight if self.max_in_flight > 0 else DEFAULT_CEILING
            cap = self.caps[engine.id] = AdaptiveCap(
                seed=max(self.parallelism, engine.gpu_slots), ceiling=ceiling, slo_s=self.ttft_slo_s
            )
            self.bursts[engine.id] = BurstLimit()
            _publish_cap(engine.id, cap, engine)
        return cap.value

    def _places(self, target: Target, priority: int) -> float:
        """Places under the caps of `target`'s engines for a request of `priority` (inf: no cap)."""
        engines = self.router.ordered(target)
        caps = [self.cap_of(e) for e in engines]
        if not engines or any(cap <= 0 for cap in caps):
            return math.inf
        return sum(in_flight_allowance(cap, priority) for cap in caps)

    def _saturated(self, target: Target, priority: int) -> bool:
        places = self._places(target, priority)
        if math.isinf(places):
            return False
        engines = self.router.ordered(target)
        busy = max(self._admitted[target.base_model], sum(e.in_flight for e in engines))
        return busy >= places

    def _shares(
        self, model: str, places: float, newcomer: UUID | None, *, joining: bool = True
    ) -> dict[TenantKey, float]:
        """Fair shares of `places` among the tenants running or waiting for `model`, and the
        `newcomer` asking for a place (unless not `joining`: a freed place is handed out)."""
        active = {key for key in self._running if key[0] == model}
        active.update((model, w.tenant_id) for w in self._waiters.get(model, ()))
        if joining:
            active.add((model, newcomer))
        return fair_shares(places, {key: self._claims.get(key, Claim(1.0)) for key in active})

    def _may_borrow(self, target: Target, tenant_id: UUID | None) -> bool:
        """At the cap: whether this tenant is below its fair share while another is above."""
        places = self._places(target, 1)
        if math.isinf(places):
            return False
        model = target.base_model
        shares = self._shares(model, places, tenant_id)
        return may_borrow((model, tenant_id), self._running_for(model), shares)

    def _running_for(self, model: str) -> dict[TenantKey, int]:
        """Requests running per tenant for `model`."""
        return {key: n for key, n in self._running.items() if key[0] == model}

    def _below_share(self, target: Target, tenant_id: UUID | None) -> bool:
        """Whether the tenant runs fewer requests than its fair share of the places."""
        places = self._places(target, 1)
        if math.isinf(places):
            return True
        model = target.base_model
        share = self._shares(model, places, tenant_id).get((model, tenant_id), 0.0)
        return self._running[model, tenant_id] < share

    def _light_wait_s(self, target: Target) -> float:
        """How long a tenant below its share may wait for a place: half the tightest TTFT
        target among the engines (the wait is added to its TTFT), at least `LIGHT_WAIT_S`.
        It is next in line, so a place frees within that unless the engine stalls."""
        targets = [
            cap.target_s()
            for e in self.router.ordered(target)
            if (cap := self.caps.get(e.id)) is not None
        ]
        known = [t for t in targets if t is not None]
        return max(min(known) / 2, LIGHT_WAIT_S) if known else LIGHT_WAIT_S

    def shed_a_burst(self, target: Target, tenant_id: UUID | None) -> None:
        """503 + Retry-After for a request that would start its prefill beside as many
        others as `target`'s engines' burst limits allow, from a heavy tenant (one the cap
        shed, or its own quota refused, within `HEAVY_FOR_S`), unless that tenant waits for
        fewer first tokens than its fair share of those places."""
        model = target.base_model
        refused_at = self._refused_at.get((model, tenant_id))
        if refused_at is None or time.monotonic() - refused_at > HEAVY_FOR_S:
            self._refused_at.pop((model, tenant_id), None)  # no longer heavy: forgotten
            return  # the engines take what this tenant offers: its bursts share a prefill
        limit = 0
        for engine in self.router.ordered(target):
            burst = self.bursts.get(engine.id)
            if burst is None or burst.limit is None:
                return  # an engine with no limit learned takes the burst
            limit += burst.limit
        prefilling = self._prefilling[model].values()
        if len(prefilling) < limit:
            return
        tenants = {entry.tenant for entry in prefilling} | {(model, tenant_id)}
        shares = fair_shares(limit, {t: self._claims.get(t, Claim(1.0)) for t in tenants})
        own = sum(1 for entry in prefilling if entry.tenant == (model, tenant_id))
        if own < shares[model, tenant_id]:
            return  # a light tenant beside a heavy one
        raise Overloaded("1", reason="engine_burst")

    def _enter(
        self,
        target: Target,
        tenant_id: UUID | None,
        limits: dict[str, int],
        request_id: str,
        prompt_tokens: int,
    ) -> None:
        model, now = target.base_model, time.monotonic()
        places = self._places(target, limits.get("priority", 0))
        alone = self._admitted[model] == 0
        # a process that has seen no request end cannot tell: its first is taken as warm
        cold = alone and now - self._quiet_since.get(model, now) > WARM_WITHIN_S
        entry = _Entry(
            now,
            idle=alone and not cold,
            at_cap=self._admitted[model] + 1 >= places - len(self.router.ordered(target)),
            prompt_tokens=prompt_tokens,
            tenant=(model, tenant_id),
            cold=cold,
        )
        self._entries[request_id] = entry
        prefilling = self._prefilling[model]
        prefilling[request_id] = entry
        for waiting in prefilling.values():
            waiting.peak = max(waiting.peak, len(prefilling))
        lone = self._lone.pop(model, None)
        if lone is not None and not lone.learned:
            lone.idle = False  # it shares its prefill with this one: no idle reference
        if entry.idle:
            self._lone[model] = entry
        self._admitted[model] += 1
        self._running[model, tenant_id] += 1

    def _leave(self, target: Target, tenant_id: UUID | None) -> None:
        """A request ended: its place goes to the waiter of the tenant furthest below its
        fair share (the oldest such waiter), so a tenant flooding the queue cannot take
        every place freed while others wait."""
        model = target.base_model
        self._admitted[model] -= 1
        if self._admitted[model] == 0:
            self._quiet_since[model] = time.monotonic()
        self._running[model, tenant_id] -= 1
        if self._running[model, tenant_id] <= 0:
            del self._running[model, tenant_id]
        self._drop_claim_if_idle(model, tenant_id)
        waiters = [w for w in self._waiters.get(model, ()) if not w.turn.done()]
        if waiters:
            places = self._places(target, 1)
            shares = self._shares(
                model, places if not math.isinf(places) else 1.0, None, joining=False
            )
            waiting = [(model, w.tenant_id) for w in waiters]
            tenant = neediest(waiting, self._running_for(model), shares)
            chosen = next(w for w in waiters if (model, w.tenant_id) == tenant)
            self._waiters[model].remove(chosen)
            chosen.turn.set_result(None)

    def _drop_claim_if_idle(self, model: str, tenant_id: UUID | None) -> None:
        """A tenant with nothing running or waiting claims no share."""
        if self._running.get((model, tenant_id)):
            return
        if not any(w.tenant_id == tenant_id for w in self._waiters.get(model, ())):
            self._claims.pop((model, tenant_id), None)

    def estimate_ttft_s(self, target: Target, prompt_tokens: int) -> float | None:
        """The TTFT a new request for `target` would see now, from the engines' load."""
        if self.shedder is None:
            return None
        engines = self.router.ordered(target)
        if not engines:
            return None
        loads = [
            self.shedder.load(e.id, in_flight=e.in_flight, queued=0, parallelism=self.parallelism)
            for e in engines
        ]
        return self.shedder.estimate_s(loads, prompt_tokens)

    async def admit(
        self,
        tenant_id: UUID,
        limits: dict[str, int],
        request_id: str,
        *,
        stream: bool,
        target: Target,
        prompt_tokens: int,
        max_tokens: int,
    ) -> Ticket | None:
        """A ticket for the request, or the refusal (429/503 with Retry-After) raised."""
        bound = limits.get("concurrent_requests")  # its share counts from its first wait
        weight = weight_of(limits.get("priority", 0), limits.get("requests_per_minute"))
        self._claims[target.base_model, tenant_id] = Claim(
            weight, float(bound) if bound else math.inf
        )
        try:
            await self.wait_for_room(target, limits.get("priority", 0), tenant_id)
            self.shed_a_burst(target, tenant_id)
        except Overloaded as shed:
            if shed.reason == "engine_concurrency":
                self._refused_at[target.base_model, tenant_id] = time.monotonic()
            self._drop_claim_if_idle(target.base_model, tenant_id)
            if self.quotas is not None:  # over its own quota: a 429 says more than a 503
                with self._heavy_if_over_quota(target, tenant_id):
                    await self.quotas.refuse_if_over_quota(
                        tenant_id,
                        limits,
                        stream=stream,
                        estimated_tokens=prompt_tokens + max_tokens,
                    )
            ADMISSION_REJECTIONS.labels(shed.reason, self.labeler(tenant_id)).inc()
            raise
        self._enter(target, tenant_id, limits, request_id, prompt_tokens)  # `hold` gives it back
        if self.quotas is None:
            return None
        try:
            with self._heavy_if_over_quota(target, tenant_id):
                return await self.quotas.admit(
                    tenant_id,
                    limits,
                    request_id=request_id,
                    stream=stream,
                    estimated_tokens=prompt_tokens + max_tokens,
                    estimated_ttft_s=self.estimate_ttft_s(target, prompt_tokens),
                )
        except BaseException:
            self._forget(request_id)
            self._leave(target, tenant_id)
            raise

    @contextlib.contextmanager
    def _heavy_if_over_quota(self, target: Target, tenant_id: UUID | None) -> Iterator[None]:
        """A tenant its own quota refuses offers more than its plan allows: heavy, for
        `shed_a_burst`, as one the cap sheds."""
        try:
            yield
        except RateLimited:
            self._refused_at[target.base_model, tenant_id] = time.monotonic()
            raise

    @contextlib.asynccontextmanager
    async def hold(
        self, ticket: Ticket | None, target: Target, tenant_id: UUID | None = None
    ) -> AsyncIterator[None]:
        """Run an admitted request: keep its leases alive, and release them and its place
        under the engine cap when it ends.

        The place under the cap is given back first, as soon as the body ends: the engine is
        done with the request, and the next waiter should not also wait for the Redis calls
        that settle this one's tokens and leases.
        """
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                self._leave(target, tenant_id)

        try:
            if ticket is None or self.quotas is None:
                yield
                return
            async with self.quotas.hold(ticket):
                try:
                    yield
                finally:
                    leave()
        finally:
            leave()

    def observe(
        self,
        engine_id: str | None,
        service_s: float,
        prompt_tokens: int,
        ttft_s: float | None,
        request_id: str = "",
    ) -> None:
        """Feed a finished request's timings back into the load estimate and the engine's cap."""
        entry = self._forget(request_id)
        if engine_id is None:
            return
        if self.shedder is not None:
            self.shedder.observe(
                engine_id, service_s=service_s, prompt_tokens=prompt_tokens, prefill_s=ttft_s or 0.0
            )
        cap = self.caps.get(engine_id)
        if cap is None:
            return
        now, cuts = time.monotonic(), cap.cuts
        if ttft_s is not None and entry is not None and not entry.learned:
            entry.prompt_tokens = prompt_tokens
            self._learn(engine_id, cap, entry, ttft_s, now)
        self._after_learning(engine_id, cap, cuts, now)

    def first_token(self, engine_id: str, ttft_s: float, request_id: str) -> None:
        """A request's first token is in: its engine's cap learns from the TTFT now, not when
        the stream ends (`observe`). A 32-token stream on the CPU engine ran ~1 s, in which
        2x load admitted another ~16 requests under a cap that had not heard yet."""
        entry, cap = self._entries.get(request_id), self.caps.get(engine_id)
        if entry is not None:
            self._prefilling[entry.tenant[0]].pop(request_id, None)
        if entry is None or cap is None or entry.learned:
            return
        now, cuts = time.monotonic(), cap.cuts
        self._learn(engine_id, cap, entry, ttft_s, now)
        self._after_learning(engine_id, cap, cuts, now)

    def _forget(self, request_id: str) -> _Entry | None:
        """A request ended (or was never let in): it waits for no first token any more."""
        entry = self._entries.pop(request_id, None)
        if entry is not None:
            self._prefilling[entry.tenant[0]].pop(request_id, None)
        return entry

    def _learn(
        self, engine_id: str, cap: AdaptiveCap, entry: _Entry, ttft_s: float, now: float
    ) -> None:
        """Feed a first token to the cap and its burst limit, once; not one of a request
        that found the engine cold (`WARM_WITHIN_S`): it is neither the idle reference nor
        a sign of load."""
        entry.learned = True
        if entry.cold:
            return
        burst = self.bursts.get(engine_id)
        if burst is not None:  # judged on the tail target before this token may move it
            burst.on_first_token(
                over_tail=cap.over_tail(ttft_s, entry.prompt_tokens), peak=entry.peak
            )
        cap.on_first_token(
            ttft_s,
            admitted_at=entry.at,
            idle=entry.idle,
            at_cap=entry.at_cap,
            now=now,
            prompt_tokens=entry.prompt_tokens,
        )

    def _after_learning(self, engine_id: str, cap: AdaptiveCap, cuts: int, now: float) -> None:
        """The engine's own queue, if probed since, goes to its cap too; a cut since `cuts`
        is shown, and the cap published."""
        engine = self.router.registry.get(engine_id)
        if engine is not None:
            load, probe = engine.engine_load, engine.engine_load_probes
            if load is not None and probe != self._probes.get(engine_id):
                self._probes[engine_id] = probe
                cap.on_engine_load(load.waiting, load.running, now, probe=probe)
            if cap.cuts != cuts and cap.last_cut is not None:
                _show_cut(engine, cap, self._counted_cuts[engine_id])
        _publish_cap(engine_id, cap, engine)
        burst = self.bursts.get(engine_id)
        if burst is not None and burst.limit is not None:
            ENGINE_BURST_LIMIT.labels(engine_id).set(burst.limit)
            if engine is not None:
                engine.burst_limit = burst.limit


def _publish_cap(engine_id: str, cap: AdaptiveCap, engine: EngineHandle | None) -> None:
    """Put an engine's cap and its TTFT target where the engines page (its handle, when
    registered here) and the metrics read them."""
    target, tail = cap.target_s(), cap.tail_target_s()
    if engine is not None:
        engine.in_flight_cap = cap.value
        engine.cap_target_ms = None if target is None else round(target * 1000, 1)
        engine.cap_tail_target_ms = None if tail is None else round(tail * 1000, 1)
    ENGINE_IN_FLIGHT_CAP.labels(engine_id).set(cap.value)
    if target is not None:
        ENGINE_CAP_TARGET.labels(engine_id).set(target)
    if tail is not None:
        ENGINE_CAP_TAIL_TARGET.labels(engine_id).set(tail)


def _show_cut(engine: EngineHandle, cap: AdaptiveCap, counted: Counter[str]) -> None:
    """Put the cap's latest cut where the engines page and the API show it, and count the
    cuts not yet `counted` under each one's reason in the metrics (a first token and a
    probe of the engine's queue may cut for two reasons at one look)."""
    assert cap.last_cut is not None
    engine.cap_cuts = cap.cuts
    engine.cap_last_cut = f"{cap.last_cut.before:g} -> {cap.last_cut.after:g}: {cap.last_cut.why}"
    engine.cap_last_cut_at = datetime.now(UTC)
    for reason, cuts in cap.cuts_by_reason.items():
        if cuts > counted[reason]:
            ENGINE_CAP_CUTS.labels(engine.id, reason).inc(cuts - counted[reason])
            counted[reason] = cuts


@dataclass(eq=False)  # compared by identity: a tenant may have several waiters
class _Waiter:
    """A request waiting for a place under the engine cap."""

    tenant_id: UUID | None
    turn: asyncio.Future[None] = field(init=False)


def headers_of(ticket: Any) -> dict[str, str]:
    """The `x-ratelimit-*` headers of an admitted request (none without a ticket)."""
    return dict(ticket.headers) if ticket is not None else {}
