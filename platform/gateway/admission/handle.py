"""What one admitted request holds from its start to its end: `EngineGate.admit` returns it.

    handle = await gate.admit(...)          # a place on the engines, and its quotas
    headers = handle.headers                # x-ratelimit-* for the response
    async with handle:                      # leases kept alive while it runs
        ... handle.first_token(ttft_s) ...  # the core paces the next admissions on it
        handle.used(tokens)                 # what to settle against the reservation
    handle.finished(engine_id, ...)         # timings, for the TTFT estimate

Leaving the `async with` gives the place back first, then settles the ticket in Redis: the
engine is done with the request, and the next waiter should not also wait for the Redis
calls that settle this one. A handle never entered (the request failed before it ran) gives
its place back with `free_place()`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from loraplex.gateway.admission.ticket import Ticket

if TYPE_CHECKING:
    from loraplex.gateway.gate import EngineGate


class AdmissionHandle:
    """One admitted request's place, ticket and timings."""

    def __init__(self, gate: EngineGate, base_model: str, request_id: str, rank_class: str):
        self.gate, self.base_model = gate, base_model
        self.request_id, self.rank_class = request_id, rank_class
        self.ticket: Ticket | None = None  # None: a gate without quotas
        self._placed = True
        self._first_token = False
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def headers(self) -> dict[str, str]:
        """The `x-ratelimit-*` headers of the response (none without quotas)."""
        return dict(self.ticket.headers) if self.ticket is not None else {}

    def first_token(self, engine_id: str, ttft_s: float) -> None:
        """The request's first token came from `engine_id`, `ttft_s` after it was sent."""
        if self._first_token or not self._placed:
            return
        self._first_token = True
        self.gate.first_token(self.base_model, self.request_id, self.rank_class, ttft_s, engine_id)

    def used(self, tokens: int) -> None:
        """The tokens the request used, settled against its reservation when it ends."""
        if self.ticket is not None:
            self.ticket.actual_tokens = tokens

    def free_place(self) -> None:
        """Give the place on the engines back (once)."""
        if self._placed:
            self._placed = False
            self.gate.finished(self.base_model, self.request_id, self.rank_class)

    def finished(
        self, engine_id: str | None, service_s: float, prompt_tokens: int, ttft_s: float | None
    ) -> None:
        """The request's timings on its engine, for the quotas' TTFT estimate."""
        self.gate.observe(engine_id, service_s, prompt_tokens, ttft_s)

    async def __aenter__(self) -> AdmissionHandle:
        self._stack = contextlib.AsyncExitStack()
        if self.ticket is not None and self.gate.quotas is not None:
            await self._stack.enter_async_context(self.gate.quotas.hold(self.ticket))
        self._stack.callback(self.free_place)  # runs first on the way out: before settling
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                return await stack.__aexit__(*exc)
            return None
        finally:
            self.free_place()
