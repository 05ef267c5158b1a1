"""The admission core: events in, admit / wait / shed out, for one pool of engine places.

What it holds to:
- **Capacity.** It never has more requests in flight than the places the engines last
  reported, nor more on one engine than that engine's own places (pool.py: a report may
  name each engine of the pool). A report that lowers them admits nobody until the pool is
  under them again; nobody is taken back. With the engines' step costs
  (`CoreConfig.ttft_model`, a calibrated profile shared by the pool's engines) a request is
  admitted only if, on the engine the router would send it to, the TTFT predicted for the
  batch it joins meets its SLO and leaves every earlier prompt there still waiting for a
  first token within its own (ttft.py). Without them, the prefill places (requests waiting for a
  first token at once) pace admissions, and hold a tenant within its share only until its
  wait runs out.
- **Fairness.** The places are split among the tenants with requests running or waiting,
  or seen within `share_linger_s`, in proportion to their plans' weights (weighted max-min,
  fair_share.py). A freed place goes to the waiting tenant furthest below its share,
  oldest request first. While another tenant is active, no tenant is admitted to a whole
  place over its share, nor over its share into the last free place.
- **Who waits, who is shed.** A request that cannot go in waits: up to `max_wait_s` for a
  tenant below its share, `busy_wait_s` for one at or over it, and never longer than its
  SLO leaves after its unloaded TTFT (with a model) or after the engine's slowest recent
  TTFT (without): the wait adds to the TTFT of what it gets in. A tenant below its share
  is never shed while another holds a whole place over its own: it is next in line, so it
  keeps waiting. A quota refusal is heard and changes nothing.

Pure and deterministic: no clock, no I/O, no randomness; ties go to the tenant seen first.
Each rule, and each default, is measured in docs/admission.md ("Overload in the
simulator").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from loraplex.gateway.admission.core.events import (
    OVER_CONCURRENCY,
    Admit,
    Arrival,
    Decision,
    EngineReport,
    Event,
    Finished,
    FirstToken,
    QuotaRefused,
    Routed,
    Shed,
    Tenant,
    Wait,
)
from loraplex.gateway.admission.core.limits import PlanLimits
from loraplex.gateway.admission.core.pool import EngineState, PoolEngines, Prompt
from loraplex.gateway.admission.core.snapshot import CoreSnapshot, TenantView
from loraplex.gateway.admission.core.ttft import TtftModel
from loraplex.gateway.admission.fair_share import fair_shares, neediest


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """The core's bounds (seconds, but for the counts). What the simulator showed of each
    default, and of each rule: docs/admission.md, "Overload in the simulator"."""

    max_wait_s: float = 0.1  # a tenant below its share waits this long for a place
    busy_wait_s: float = 0.02  # a tenant at or over its share waits this long
    retry_after_s: float = 1.0  # the Retry-After of a shed request
    # A tenant counts in the shares this long after its last request ended, so a tenant
    # between two requests comes back to its share rather than to a place another took.
    share_linger_s: float = 1.0
    initial_places: int = 1  # places before the first engine report
    # The TTFT a request should get (0: none known). With it, a wait is cut to what the SLO
    # leaves after the engine's own recent time to a first token: a wait that would make
    # the request miss anyway only adds to the queue behind it.
    ttft_slo_s: float = 0.0
    engine_ttft_samples: int = 32  # recent first tokens the engine's TTFT is read from
    # The engine's step costs (a calibrated profile). With them, a request is admitted only
    # if the TTFT predicted for the batch it joins meets its SLO and every earlier prompt's
    # still waiting for a first token (ttft.py); without, places and prefill places pace.
    ttft_model: TtftModel | None = None
    # With a model, a request's SLO is this many times its own unloaded TTFT (a long prompt
    # takes longer alone), and never under `ttft_slo_s` (0: `ttft_slo_s` for every prompt).
    ttft_slo_multiple: float = 0.0


@dataclass(slots=True)
class _Waiting:
    request_id: str
    arrival: Arrival
    deadline: float


@dataclass
class AdmissionCore:
    """One pool of engine places shared fairly among tenants."""

    config: CoreConfig = field(default_factory=CoreConfig)
    places: int = field(init=False)
    prefill_places: int | None = field(default=None, init=False)
    _tenant_of: dict[str, Tenant] = field(default_factory=dict, init=False)  # in flight
    _engines: PoolEngines = field(init=False)
    _running: dict[Tenant, int] = field(default_factory=dict, init=False)
    _queues: dict[Tenant, deque[_Waiting]] = field(default_factory=dict, init=False)
    _limits: dict[Tenant, PlanLimits] = field(default_factory=dict, init=False)
    _admitted_at: dict[str, float] = field(default_factory=dict, init=False)
    _engine_ttfts: deque[float] = field(default_factory=deque, init=False)
    _last_seen: dict[Tenant, float] = field(default_factory=dict, init=False)
    _now: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.places = max(0, self.config.initial_places)
        self._engines = PoolEngines(self.places)

    @property
    def in_flight(self) -> int:
        """Requests admitted and not finished."""
        return len(self._tenant_of)

    def waiting(self) -> int:
        """Requests waiting for a place."""
        return sum(len(q) for q in self._queues.values())

    def handle(self, event: Event) -> list[Decision]:
        """Apply one event; the decisions it makes, in order."""
        self._now = max(self._now, event.at)
        if isinstance(event, Arrival):
            return self._arrive(event)
        if isinstance(event, QuotaRefused):
            return []  # heard, changes nothing: shedding such a tenant early did nothing
        if isinstance(event, FirstToken):
            self._first_token(event.request_id, event.at)
            return self._hand_out(event.at)
        if isinstance(event, Finished):
            self._finish(event.request_id)
            return self._hand_out(event.at)
        if isinstance(event, EngineReport):
            self.places, self.prefill_places = max(0, event.places), event.prefill_places
            self._engines.report(self.places, event.engines)
            return self._hand_out(event.at)
        if isinstance(event, Routed):
            name, state = event.engine, self._engines.engine(event.engine)
            starts_at = self._starts_at(state) if state is not None else self._now
            self._engines.move(event.request_id, name, starts_at)
            return self._hand_out(event.at)
        return self._expire(event.at) + self._hand_out(event.at)

    def snapshot(self) -> CoreSnapshot:
        """The core's view now (as of its last event): places, and each active tenant's
        share, running and waiting requests."""
        shares = self.shares()
        tenants = tuple(
            TenantView(t, shares[t], self._running.get(t, 0), len(self._queues.get(t, ())))
            for t in sorted(shares)
        )
        return CoreSnapshot(
            self._now,
            self.places,
            self.prefill_places,
            self.in_flight,
            self._engines.prefilling_count(),
            self.waiting(),
            tenants,
        )

    def holding(self) -> dict[str, int]:
        """Each engine's requests in flight, by name ("" for a pool reported whole)."""
        holding: dict[str, int] = self._engines.holding()
        return holding

    def shares(self) -> dict[Tenant, float]:
        """Each active tenant's fair share of the places now."""
        return self._shares_with(None)

    def _shares_with(self, newcomer: Tenant | None) -> dict[Tenant, float]:
        """Fair shares among the tenants running, waiting or seen within `share_linger_s`
        (and `newcomer`)."""
        linger = self.config.share_linger_s
        active = [
            t
            for t in self._limits
            if self._running.get(t)
            or self._queues.get(t)
            or self._now - self._last_seen.get(t, -math.inf) <= linger
            or t == newcomer
        ]
        shares: dict[Tenant, float] = fair_shares(
            self.places, {t: self._limits[t].claim() for t in active}
        )
        return shares

    def _arrive(self, arrival: Arrival) -> list[Decision]:
        tenant = arrival.tenant
        self._limits[tenant] = arrival.limits
        self._last_seen[tenant] = arrival.at
        bound = arrival.limits.concurrent_requests
        if bound is not None and self._running.get(tenant, 0) >= bound:
            # Over its own plan, not the engines' load: its quota's 429, whatever the room.
            return [Shed(arrival.request_id, OVER_CONCURRENCY, self.config.retry_after_s)]
        if not self._someone_waits() and self._has_room(arrival):
            return [self._admit(arrival, arrival.at)]
        queue = self._queues.setdefault(tenant, deque())
        below = self._below_share(tenant)
        wait_s = min(
            self.config.max_wait_s if below else self.config.busy_wait_s,
            self._wait_left_s(arrival),
        )
        if wait_s <= 0 and not below:
            self._drop_if_idle(tenant)
            return [Shed(arrival.request_id, "engine_busy", self.config.retry_after_s)]
        queue.append(_Waiting(arrival.request_id, arrival, arrival.at + wait_s))
        decisions = self._hand_out(arrival.at)
        if not any(isinstance(d, Admit) and d.request_id == arrival.request_id for d in decisions):
            decisions.append(Wait(arrival.request_id, arrival.at + wait_s))
        return decisions

    def _first_token(self, request_id: str, at: float) -> None:
        self._engines.first_token(request_id)
        admitted_at = self._admitted_at.pop(request_id, None)
        if admitted_at is None:
            return
        self._engine_ttfts.append(at - admitted_at)
        if len(self._engine_ttfts) > self.config.engine_ttft_samples:
            self._engine_ttfts.popleft()

    def _wait_left_s(self, arrival: Arrival) -> float:
        """What the SLO leaves for a wait: with a model, after the request's unloaded TTFT;
        without, after the engine's slowest recent TTFT (from admission; unbounded without
        an SLO or before any first token). The slowest, not a median: the wait is added to
        every request it admits, and the SLO is a p99."""
        model = self.config.ttft_model
        if model is not None:
            alone_s: float = model.unloaded_s(arrival.prompt_tokens)
            left_s: float = self._due_at(arrival) - arrival.at - alone_s
            return left_s
        if self.config.ttft_slo_s <= 0 or not self._engine_ttfts:
            return float("inf")
        return self.config.ttft_slo_s - max(self._engine_ttfts)

    def _someone_waits(self) -> bool:
        return any(self._queues.values())

    def _due_at(self, arrival: Arrival) -> float:
        """When the request's first token is due: its arrival and its SLO (never, without
        an SLO)."""
        slo = self.config.ttft_slo_s
        model = self.config.ttft_model
        if model is not None and self.config.ttft_slo_multiple > 0:
            slo = max(slo, self.config.ttft_slo_multiple * model.unloaded_s(arrival.prompt_tokens))
        return arrival.at + slo if slo > 0 else math.inf

    def _has_room(self, arrival: Arrival) -> bool:
        tenant, limits = arrival.tenant, arrival.limits
        if self._would_hold_a_whole_place_over(tenant):
            return False
        reserve = 1 if self._would_pass_its_share(tenant) else 0
        if self.in_flight + 1 + reserve > int(self.places * limits.places_share()):
            return False
        if (
            self.prefill_places is not None
            and self._engines.prefilling_count() >= self.prefill_places
        ):
            return False
        _, engine = self._engines.chosen()
        return engine.has_room and self._in_time(arrival, engine)

    def _in_time(self, arrival: Arrival, engine: EngineState) -> bool:
        """Whether, admitted now to `engine`, the request would get its first token by when
        it is due, and so would every prompt it would share a prefill step with there
        (always, without a model). The engine's steps are not seen from here: a prompt
        whose step ahead has ended (`Prompt.starts_at`) is taken to be in a prefill step,
        which the request waits for but does not slow; the request's own TTFT is the slower
        of that and of sharing a step with every prompt still waiting. A long prompt (alone,
        slower than `ttft_slo_s`) goes in only where it delays no prompt at all: its step
        stalls all behind it."""
        model = self.config.ttft_model
        if model is None:
            return True
        decoding, in_step, queued = self._prefill_view(engine)
        step_load = (sum(p.tokens for p in in_step), len(in_step))
        tokens = sum(p.tokens for p in queued) + arrival.prompt_tokens
        left_s = self._step_left_s(model, decoding, in_step, queued)
        behind_s = model.first_token_s(decoding, tokens, len(queued) + 1, step_load, left_s)
        prompts = list(engine.prefilling.values())
        every = sum(p.tokens for p in prompts) + arrival.prompt_tokens
        together_s = model.first_token_s(decoding, every, len(prompts) + 1)
        own_s = max(behind_s, together_s)
        long = model.unloaded_s(arrival.prompt_tokens) > self.config.ttft_slo_s
        delayed = prompts if long else queued
        due = min((p.due for p in delayed), default=math.inf)
        in_time: bool = self._now + (own_s if long else behind_s) <= due
        return in_time and self._now + own_s <= self._due_at(arrival)

    def _prefill_view(self, engine: EngineState) -> tuple[int, list[Prompt], list[Prompt]]:
        """The engine's requests decoding, and its prompts taken to be in a prefill step
        and still waiting for one."""
        decoding = len(engine.requests) - len(engine.prefilling)
        prompts = list(engine.prefilling.values())
        in_step = [p for p in prompts if p.starts_at <= self._now]
        return decoding, in_step, [p for p in prompts if p.starts_at > self._now]

    def _starts_at(self, engine: EngineState) -> float:
        """When a prompt admitted now to `engine` starts its prefill at the latest: after
        the step in progress (now, without a model)."""
        model = self.config.ttft_model
        if model is None:
            return self._now
        decoding, in_step, queued = self._prefill_view(engine)
        return self._now + self._step_left_s(model, decoding, in_step, queued)

    def _step_left_s(
        self, model: TtftModel, decoding: int, in_step: list[Prompt], queued: list[Prompt]
    ) -> float:
        """What is left of the engine's step in progress, as far as the core can tell: of a
        prefill step, its cost less the time since its prompts could start; of the step the
        queued prompts wait for, until the first of them starts; of a decode step, whose
        start is not seen, all of it. (Counting the prefill step whole again shed the third
        request of a light tenant's burst, a millisecond late by that count and in time by
        this one: docs/admission.md, "Overload in the simulator".)"""
        if in_step:
            step_load = (sum(p.tokens for p in in_step), len(in_step))
            started: float = max(p.starts_at for p in in_step)
            whole: float = model.step_in_progress_s(decoding, step_load)
            return max(0.0, whole - (self._now - started))
        if queued:
            starts: float = min(p.starts_at for p in queued)
            return max(0.0, starts - self._now)
        decode_step: float = model.step_in_progress_s(decoding)
        return decode_step

    def _would_pass_its_share(self, tenant: Tenant) -> bool:
        """Whether one more place would put the tenant over its share while another tenant
        is active: such a tenant never takes the last free place, kept for one below its
        share (who would otherwise wait for the next place to free, and miss its TTFT)."""
        shares = self._shares_with(tenant)
        return len(shares) > 1 and self._running.get(tenant, 0) + 1 > shares[tenant]

    def _would_hold_a_whole_place_over(self, tenant: Tenant) -> bool:
        """Whether one more place would put the tenant a whole place over its share while
        another tenant is active: it never does, so a tenant below its share is never left
        waiting behind it (`_protected`)."""
        shares = self._shares_with(tenant)
        return len(shares) > 1 and self._running.get(tenant, 0) + 1 >= shares[tenant] + 1

    def _admit(self, arrival: Arrival, at: float) -> Admit:
        request_id, tenant = arrival.request_id, arrival.tenant
        name, engine = self._engines.chosen()
        prompt = Prompt(arrival.prompt_tokens, self._due_at(arrival), self._starts_at(engine))
        self._tenant_of[request_id] = tenant
        self._engines.add(request_id, name, prompt)
        self._admitted_at[request_id] = at
        self._running[tenant] = self._running.get(tenant, 0) + 1
        return Admit(request_id, at, name)

    def _finish(self, request_id: str) -> None:
        tenant = self._tenant_of.pop(request_id, None)
        self._engines.finish(request_id)
        self._admitted_at.pop(request_id, None)
        if tenant is None:
            return
        self._running[tenant] -= 1
        if not self._running[tenant]:
            del self._running[tenant]
        self._drop_if_idle(tenant)

    def _hand_out(self, at: float) -> list[Decision]:
        """Freed places go to the waiting tenant furthest below its share, oldest first."""
        decisions: list[Decision] = []
        while True:
            candidates = [t for t, q in self._queues.items() if q and self._has_room(q[0].arrival)]
            if not candidates:
                return decisions
            shares = self.shares()
            tenant: Tenant = neediest(candidates, self._running, shares)
            waiting = self._queues[tenant].popleft()
            decisions.append(self._admit(waiting.arrival, at))

    def _expire(self, at: float) -> list[Decision]:
        """Waits that ran out are shed, except a tenant below its share while another holds
        more than its own: it is next in line and keeps waiting."""
        decisions: list[Decision] = []
        for tenant, queue in list(self._queues.items()):
            while queue and queue[0].deadline <= at:
                if self._protected(tenant):
                    break
                waiting = queue.popleft()
                if self._paced_only(tenant, waiting.arrival):
                    decisions.append(self._admit(waiting.arrival, at))
                    continue
                shed = Shed(waiting.request_id, "waited_too_long", self.config.retry_after_s)
                decisions.append(shed)
            self._drop_if_idle(tenant)
        return decisions

    def _paced_only(self, tenant: Tenant, arrival: Arrival) -> bool:
        """Whether only the prefill places held this request (a place is free) and its
        tenant, this request counted, is within its share: the prefill places pace a
        burst, they do not refuse a light tenant (as seen in the simulator, a tenant alone
        at a quarter of capacity had a burst of three shed)."""
        if self.config.ttft_model is not None:
            return False  # its wait ran out when the SLO could no longer be met
        if self.in_flight + 1 > int(self.places * arrival.limits.places_share()):
            return False
        shares = self.shares()
        demand = self._running.get(tenant, 0) + len(self._queues.get(tenant, ())) + 1
        return demand <= shares.get(tenant, 0.0)

    def _protected(self, tenant: Tenant) -> bool:
        """Below its share, counting what it has queued, while some other tenant holds at
        least one whole place more than its share (whole places, as fair_share.may_borrow:
        with shares of 1.75, tenants holding 1 or 2 are all at their share). Its queue
        counts: a tenant of four equal ones that queues a flood is not below its share,
        and waiting past the deadline would only lengthen every TTFT of that flood."""
        shares = self.shares()
        demand = self._running.get(tenant, 0) + len(self._queues.get(tenant, ()))
        if demand > shares.get(tenant, 0.0):
            return False
        return any(n >= shares.get(t, 0.0) + 1 for t, n in self._running.items() if t != tenant)

    def _below_share(self, tenant: Tenant) -> bool:
        """Whether the tenant's places and queue, with one more request, fit its share."""
        share = self._shares_with(tenant).get(tenant, 0.0)
        demand = self._running.get(tenant, 0) + len(self._queues.get(tenant, ()))
        return demand + 1 <= share

    def _drop_if_idle(self, tenant: Tenant) -> None:
        """A tenant with nothing running or queued keeps its limits while it lingers in the
        shares (`share_linger_s`); those that left longer ago are forgotten."""
        if not self._running.get(tenant) and not self._queues.get(tenant):
            self._queues.pop(tenant, None)
            self._last_seen[tenant] = self._now
        linger = self.config.share_linger_s
        for gone in [t for t, seen in self._last_seen.items() if self._now - seen > linger]:
            if not self._running.get(gone) and not self._queues.get(gone):
                self._limits.pop(gone, None)
                self._last_seen.pop(gone, None)


def run(core: AdmissionCore, events: Iterable[Event]) -> list[Decision]:
    """Every decision a sequence of events makes, in order (for tests and replays)."""
    return [decision for event in events for decision in core.handle(event)]
