"""The live admission before issue #45 (the gate that drove an adaptive cap), for the
simulator over its pure parts: the adaptive cap (adaptive_cap), the burst limit
(burst_limit), the fair shares and borrowing (borrowing), for one engine, driven by the
admission core's events. The overload scenario calls it "today".

What it keeps of gate.py: the cap per priority class (`in_flight_allowance`), a tenant
below its share borrowing past the cap while another holds more than its own, the waits
(half the TTFT target for a tenant below its share, `queue_wait_s` otherwise), the raise
for room before a shed, the burst limit for a tenant shed or quota-refused within
`HEAVY_FOR_S`, the idle reference (warm, alone through its prefill) and the engine-queue
probe. What it leaves out: Redis, the priority lane, several engines and API processes.
Its constants are the ones the live gate ran with.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from loraplex.gateway.admission.core import (
    Admit,
    Arrival,
    Decision,
    EngineReport,
    Event,
    Finished,
    FirstToken,
    QuotaRefused,
    Shed,
    Wait,
)
from loraplex.gateway.admission.fair_share import Claim, fair_shares, neediest
from loraplex.serving.simulator.overload.previous_gate.adaptive_cap import (
    WARM_WITHIN_S,
    AdaptiveCap,
)
from loraplex.serving.simulator.overload.previous_gate.borrowing import may_borrow
from loraplex.serving.simulator.overload.previous_gate.burst_limit import BurstLimit

PRIORITY_SHARE = (0.8, 1.0, 1.2)  # gate.PRIORITY_SHARE
LIGHT_WAIT_S = 0.1  # gate.LIGHT_WAIT_S
HEAVY_FOR_S = 1.0  # gate.HEAVY_FOR_S
QUEUE_WAIT_S = 0.005  # settings: LORAPLEX_ENGINE_QUEUE_WAIT_S
PARALLELISM = 8  # settings: LORAPLEX_ADMISSION_PARALLELISM


def in_flight_allowance(cap: int, priority: int) -> int:
    """gate.in_flight_allowance: requests in flight for a request of `priority` to start."""
    share = PRIORITY_SHARE[min(max(priority, 0), len(PRIORITY_SHARE) - 1)]
    return max(1, round(cap * share))


@dataclass(slots=True)
class _Entry:
    at: float
    idle: bool
    at_cap: bool
    prompt_tokens: int
    tenant: str
    peak: int = 1
    cold: bool = False


@dataclass(slots=True)
class _Waiter:
    arrival: Arrival
    deadline: float


class TodaysGate:
    """gate.EngineGate's decisions for one engine, as events in and decisions out."""

    def __init__(self, parallelism: int = PARALLELISM, queue_wait_s: float = QUEUE_WAIT_S):
        self.cap = AdaptiveCap(seed=parallelism)
        self.burst = BurstLimit()
        self.queue_wait_s = queue_wait_s
        self._admitted = 0
        self._running: Counter[str] = Counter()
        self._claims: dict[str, Claim] = {}
        self._waiters: list[_Waiter] = []
        self._entries: dict[str, _Entry] = {}
        self._prefilling: dict[str, _Entry] = {}
        self._refused_at: dict[str, float] = {}
        self._quiet_since: float | None = None
        self._lone: _Entry | None = None
        self._probe = 0

    def handle(self, event: Event) -> list[Decision]:
        """Apply one event; the decisions it makes."""
        if isinstance(event, Arrival):
            return self._arrive(event)
        if isinstance(event, QuotaRefused):
            self._refused_at[event.tenant] = event.at
            return []
        if isinstance(event, FirstToken):
            self._first_token(event.request_id, event.at)
            return []
        if isinstance(event, Finished):
            return self._leave(event.request_id, event.at)
        if isinstance(event, EngineReport):
            self._probe += 1
            self.cap.on_engine_load(event.waiting, event.running, event.at, probe=self._probe)
            return []
        return self._expire(event.at)

    def _arrive(self, arrival: Arrival) -> list[Decision]:
        tenant = arrival.tenant
        self._claims[tenant] = arrival.limits.claim()
        priority = arrival.limits.priority
        if (self._waiters or self._saturated(priority)) and not self._may_borrow(tenant):
            below = self._below_share(tenant)
            wait_s = max(self._light_wait_s(), self.queue_wait_s) if below else self.queue_wait_s
            self._waiters.append(_Waiter(arrival, arrival.at + wait_s))
            return [Wait(arrival.request_id, arrival.at + wait_s)]
        return [self._past_the_cap(arrival, arrival.at)]

    def _past_the_cap(self, arrival: Arrival, at: float) -> Decision:
        """gate.shed_a_burst, then `_enter`."""
        if self._a_burst_to_shed(arrival.tenant, at):
            self._drop_claim_if_idle(arrival.tenant)
            return Shed(arrival.request_id, "engine_burst", 1.0)
        self._enter(arrival, at)
        return Admit(arrival.request_id, at)

    def _expire(self, at: float) -> list[Decision]:
        """gate.wait_for_room's timeout: `shed_if_saturated`."""
        decisions: list[Decision] = []
        for waiter in [w for w in self._waiters if w.deadline <= at]:
            self._waiters.remove(waiter)
            arrival = waiter.arrival
            priority, tenant = arrival.limits.priority, arrival.tenant
            room = not self._saturated(priority) or self._may_borrow(tenant)
            if not room and self.cap.raise_for_room():
                room = not self._saturated(priority)
            if room:
                decisions.append(self._past_the_cap(arrival, at))
                continue
            self._refused_at[tenant] = at
            self._drop_claim_if_idle(tenant)
            decisions.append(Shed(arrival.request_id, "engine_concurrency", 1.0))
        return decisions

    def _leave(self, request_id: str, at: float) -> list[Decision]:
        entry = self._entries.pop(request_id, None)
        self._prefilling.pop(request_id, None)
        if entry is None:
            return []
        self._admitted -= 1
        if self._admitted == 0:
            self._quiet_since = at
        self._running[entry.tenant] -= 1
        if self._running[entry.tenant] <= 0:
            del self._running[entry.tenant]
        self._drop_claim_if_idle(entry.tenant)
        if not self._waiters:
            return []
        shares = self._shares(self._places(1), None, joining=False)
        tenant = neediest([w.arrival.tenant for w in self._waiters], self._running, shares)
        chosen = next(w for w in self._waiters if w.arrival.tenant == tenant)
        arrival = chosen.arrival
        if self._saturated(arrival.limits.priority) and not self._may_borrow(tenant):
            return []  # woken, still no room: it waits on until its deadline
        self._waiters.remove(chosen)
        return [self._past_the_cap(arrival, at)]

    def _first_token(self, request_id: str, at: float) -> None:
        entry = self._entries.get(request_id)
        self._prefilling.pop(request_id, None)
        if entry is None or entry.cold:
            return
        ttft = at - entry.at
        self.burst.on_first_token(
            over_tail=self.cap.over_tail(ttft, entry.prompt_tokens), peak=entry.peak
        )
        self.cap.on_first_token(
            ttft,
            admitted_at=entry.at,
            idle=entry.idle,
            at_cap=entry.at_cap,
            now=at,
            prompt_tokens=entry.prompt_tokens,
        )

    def _enter(self, arrival: Arrival, at: float) -> None:
        alone = self._admitted == 0
        quiet = self._quiet_since if self._quiet_since is not None else at
        cold = alone and at - quiet > WARM_WITHIN_S
        entry = _Entry(
            at,
            idle=alone and not cold,
            at_cap=self._admitted + 1 >= self._places(arrival.limits.priority) - 1,
            prompt_tokens=arrival.prompt_tokens,
            tenant=arrival.tenant,
            cold=cold,
        )
        self._entries[arrival.request_id] = entry
        self._prefilling[arrival.request_id] = entry
        for waiting in self._prefilling.values():
            waiting.peak = max(waiting.peak, len(self._prefilling))
        if self._lone is not None and self._lone is not entry:
            self._lone.idle = False  # it shares its prefill with this one
        self._lone = entry if entry.idle else None
        self._admitted += 1
        self._running[arrival.tenant] += 1

    def _a_burst_to_shed(self, tenant: str, at: float) -> bool:
        refused_at = self._refused_at.get(tenant)
        if refused_at is None or at - refused_at > HEAVY_FOR_S:
            self._refused_at.pop(tenant, None)
            return False
        limit = self.burst.limit
        if limit is None or len(self._prefilling) < limit:
            return False
        tenants = {e.tenant for e in self._prefilling.values()} | {tenant}
        shares = fair_shares(limit, {t: self._claims.get(t, Claim(1.0)) for t in tenants})
        own = sum(1 for e in self._prefilling.values() if e.tenant == tenant)
        return own >= shares[tenant]

    def _places(self, priority: int) -> int:
        return in_flight_allowance(self.cap.value, priority)

    def _saturated(self, priority: int) -> bool:
        return self._admitted >= self._places(priority)

    def _shares(
        self, places: float, newcomer: str | None, *, joining: bool = True
    ) -> dict[str, float]:
        active = set(self._running) | {w.arrival.tenant for w in self._waiters}
        if joining and newcomer is not None:
            active.add(newcomer)
        return fair_shares(places, {t: self._claims.get(t, Claim(1.0)) for t in active})

    def _may_borrow(self, tenant: str) -> bool:
        return may_borrow(tenant, self._running, self._shares(self._places(1), tenant))

    def _below_share(self, tenant: str) -> bool:
        share = self._shares(self._places(1), tenant).get(tenant, 0.0)
        return self._running[tenant] < share

    def _light_wait_s(self) -> float:
        target = self.cap.target_s()
        return max(target / 2, LIGHT_WAIT_S) if target is not None else LIGHT_WAIT_S

    def _drop_claim_if_idle(self, tenant: str) -> None:
        if not self._running.get(tenant) and not any(
            w.arrival.tenant == tenant for w in self._waiters
        ):
            self._claims.pop(tenant, None)
