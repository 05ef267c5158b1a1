"""The gateway's admission step: quotas and rate limits in Redis, and overload shedding.

Before a request touches an engine, the gate checks two load signals and then asks
`Admission` to admit it within the tenant's limits:
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
arrivals. A place freed goes to the waiting tenant with the fewest requests running (oldest
first among equals): a tenant flooding the queue gets its turn after the others'.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from loraplex.gateway.admission import Admission, AdmissionController, Ticket
from loraplex.gateway.admission.errors import Overloaded
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.observability.metrics import ADMISSION_REJECTIONS, TenantLabeler

# An engine running `cap x share` requests refuses a request of that priority: the lowest
# class is shed first, the highest may use a little headroom past the cap.
PRIORITY_SHARE = (0.8, 1.0, 1.2)


def in_flight_allowance(cap: int, priority: int) -> int:
    """How many requests an engine may have in flight for a request of `priority` to start."""
    share = PRIORITY_SHARE[min(max(priority, 0), len(PRIORITY_SHARE) - 1)]
    return max(1, round(cap * share))


class AdmissionGate:
    """Admits requests against quotas and load; a gate without Admission admits everything."""

    def __init__(
        self,
        admission: Admission | None,
        controller: AdmissionController | None,
        router: EngineRouter,
        parallelism: int,
        max_in_flight: int = 0,
        labeler: TenantLabeler | None = None,
        queue_wait_s: float = 0.0,
    ):
        self.admission, self.controller, self.router = admission, controller, router
        self.parallelism, self.max_in_flight = parallelism, max_in_flight
        self.labeler, self.queue_wait_s = labeler or TenantLabeler(), queue_wait_s
        self._admitted: Counter[str] = Counter()  # per base model: admitted, not yet ended
        self._running: Counter[tuple[str, UUID | None]] = Counter()  # the same, per tenant
        self._waiters: defaultdict[str, list[_Waiter]] = defaultdict(list)  # arrival order

    def shed_if_saturated(self, target: Target, priority: int, tenant_id: UUID) -> None:
        """503 + Retry-After when every candidate engine is at the in-flight cap for `priority`."""
        if self._saturated(target, priority):
            ADMISSION_REJECTIONS.labels("engine_concurrency", self.labeler(tenant_id)).inc()
            raise Overloaded("1")

    async def wait_for_room(self, target: Target, priority: int, tenant_id: UUID) -> None:
        """Return once `target` is under the cap for `priority`, or shed after `queue_wait_s`."""
        waiters = self._waiters[target.base_model]
        if not waiters and not self._saturated(target, priority):
            return
        if self.queue_wait_s <= 0:
            self.shed_if_saturated(target, priority, tenant_id)
            return
        deadline = asyncio.get_running_loop().time() + self.queue_wait_s
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
            if not self._saturated(target, priority):
                return

    def _saturated(self, target: Target, priority: int) -> bool:
        if self.max_in_flight <= 0:
            return False
        engines = self.router.ordered(target)
        allowance = in_flight_allowance(self.max_in_flight, priority)
        busy = max(self._admitted[target.base_model], sum(e.in_flight for e in engines))
        return bool(engines) and busy >= allowance * len(engines)

    def _enter(self, target: Target, tenant_id: UUID | None) -> None:
        self._admitted[target.base_model] += 1
        self._running[target.base_model, tenant_id] += 1

    def _leave(self, target: Target, tenant_id: UUID | None) -> None:
        """A request ended: its place goes to a waiter of the tenant with the fewest requests
        running (the oldest such waiter), so a tenant flooding the queue cannot take every
        place freed while others wait."""
        model = target.base_model
        self._admitted[model] -= 1
        self._running[model, tenant_id] -= 1
        if self._running[model, tenant_id] <= 0:
            del self._running[model, tenant_id]
        waiters = [w for w in self._waiters.get(model, ()) if not w.turn.done()]
        if waiters:
            chosen = min(waiters, key=lambda w: self._running[model, w.tenant_id])
            self._waiters[model].remove(chosen)
            chosen.turn.set_result(None)

    def estimate_ttft_s(self, target: Target, prompt_tokens: int) -> float | None:
        """The TTFT a new request for `target` would see now, from the engines' load."""
        if self.controller is None:
            return None
        engines = self.router.ordered(target)
        if not engines:
            return None
        loads = [
            self.controller.load(
                e.id, in_flight=e.in_flight, queued=0, parallelism=self.parallelism
            )
            for e in engines
        ]
        return self.controller.estimate_s(loads, prompt_tokens)

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
        await self.wait_for_room(target, limits.get("priority", 0), tenant_id)
        self._enter(target, tenant_id)  # `hold` gives it back when the request ends
        if self.admission is None:
            return None
        try:
            return await self.admission.admit(
                tenant_id,
                limits,
                request_id=request_id,
                stream=stream,
                estimated_tokens=prompt_tokens + max_tokens,
                estimated_ttft_s=self.estimate_ttft_s(target, prompt_tokens),
            )
        except BaseException:
            self._leave(target, tenant_id)
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
            if ticket is None or self.admission is None:
                yield
                return
            async with self.admission.hold(ticket):
                try:
                    yield
                finally:
                    leave()
        finally:
            leave()

    def observe(
        self, engine_id: str | None, service_s: float, prompt_tokens: int, ttft_s: float | None
    ) -> None:
        """Feed a finished request's timings back into the load estimate."""
        if self.controller is None or engine_id is None:
            return
        self.controller.observe(
            engine_id, service_s=service_s, prompt_tokens=prompt_tokens, prefill_s=ttft_s or 0.0
        )


@dataclass(eq=False)  # compared by identity: a tenant may have several waiters
class _Waiter:
    """A request waiting for a place under the engine cap."""

    tenant_id: UUID | None
    turn: asyncio.Future[None] = field(init=False)


def headers_of(ticket: Any) -> dict[str, str]:
    """The `x-ratelimit-*` headers of an admitted request (none without a ticket)."""
    return dict(ticket.headers) if ticket is not None else {}
