"""The gateway's admission step: quotas and rate limits in Redis, and overload shedding.

Before a request touches an engine, the gate estimates the TTFT it would see (requests in
flight on the engines that could serve it, their measured service time, the prompt's prefill)
and asks `Admission` to admit it within the tenant's limits. After the request, it feeds the
measured service time back so the estimate follows the engines' real speed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from loraplex.gateway.admission import Admission, AdmissionController, Ticket
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter


class AdmissionGate:
    """Admits requests against quotas and load; a gate without Admission admits everything."""

    def __init__(
        self,
        admission: Admission | None,
        controller: AdmissionController | None,
        router: EngineRouter,
        parallelism: int,
    ):
        self.admission, self.controller, self.router, self.parallelism = (
            admission,
            controller,
            router,
            parallelism,
        )

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
        if self.admission is None:
            return None
        return await self.admission.admit(
            tenant_id,
            limits,
            request_id=request_id,
            stream=stream,
            estimated_tokens=prompt_tokens + max_tokens,
            estimated_ttft_s=self.estimate_ttft_s(target, prompt_tokens),
        )

    @contextlib.asynccontextmanager
    async def hold(self, ticket: Ticket | None) -> AsyncIterator[None]:
        """Keep the ticket's concurrency leases alive while the request runs; release after."""
        if ticket is None or self.admission is None:
            yield
            return
        async with self.admission.hold(ticket):
            yield

    def observe(
        self, engine_id: str | None, service_s: float, prompt_tokens: int, ttft_s: float | None
    ) -> None:
        """Feed a finished request's timings back into the load estimate."""
        if self.controller is None or engine_id is None:
            return
        self.controller.observe(
            engine_id, service_s=service_s, prompt_tokens=prompt_tokens, prefill_s=ttft_s or 0.0
        )


def headers_of(ticket: Any) -> dict[str, str]:
    """The `x-ratelimit-*` headers of an admitted request (none without a ticket)."""
    return dict(ticket.headers) if ticket is not None else {}
