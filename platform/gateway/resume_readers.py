"""Who may follow a resumable stream: a place under the tenant's stream limit and one of
this process's reader places, both held until the reader ends.

A reader (`GET .../{id}/events`) holds a Redis connection through every blocking read, so
readers are what an attacker multiplies to exhaust Redis. Two bounds, checked before the
first read:
- per tenant: a concurrency lease from admission (`TenantQuotas`, the same Lua script,
  renewal and release as a stream's), in a lease set of its own limited by the plan's
  `concurrent_streams`. Its own set, not the streams' one: the generation being resumed
  still holds its stream slot, so in the shared set a tenant at its limit could not resume
  its own stream after a network blip, and the stream would be aborted once nobody read it
  for the window. A tenant may follow as many resumed streams as it may run, never more.
- per process: `max_readers` places, matching the size of the readers' own Redis pool
  (`connections.readers_redis`), so a reader admitted here always finds a connection and
  readers never take admission's.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from uuid import UUID

from loraplex.errors import LoraplexError
from loraplex.gateway.admission import RateLimited, TenantQuotas, Ticket
from loraplex.observability.metrics import TenantLabeler, count_limit_refusal

READERS_RETRY_AFTER_S = 1  # a reader ends within a heartbeat of its stream's end
STREAM_LIMIT = "concurrent_streams"


class TooManyReaders(LoraplexError):
    """This API process follows as many resumed streams as it may (503 with Retry-After)."""

    status_code = 503
    code = "too_many_readers"

    def __init__(self) -> None:
        super().__init__(
            "this server is following as many resumed streams as it can; "
            "resume again after the time in Retry-After",
            headers={"Retry-After": str(READERS_RETRY_AFTER_S)},
        )


class _Place:
    """One of the process's reader places; given back once, however the reader ends."""

    def __init__(self, readers: ResumeReaders):
        self._readers: ResumeReaders | None = readers
        readers.active += 1

    def give_back(self) -> None:
        """Free the place (idempotent: the reader's end and its finalizer both call it)."""
        readers, self._readers = self._readers, None
        if readers is not None:
            readers.active -= 1


class ResumeReaders:
    """Admits resume readers against their tenant's stream limit and the process's cap."""

    def __init__(
        self,
        quotas: TenantQuotas | None,
        max_readers: int,
        labeler: TenantLabeler | None = None,
    ):
        self.quotas, self.max_readers = quotas, max_readers
        self.labeler = labeler or TenantLabeler()
        self.active = 0  # readers admitted and not yet ended, in this process

    async def follow(
        self,
        tenant_id: UUID,
        limits: Mapping[str, int],
        open_events: Callable[[], Awaitable[AsyncIterator[bytes]]],
    ) -> AsyncIterator[bytes]:
        """The events `open_events()` gives, held under both bounds: `TooManyReaders`, the
        stream's own `NotFound` or admission's `RateLimited` come before a byte is sent;
        the places are freed when the reader ends."""
        if self.active >= self.max_readers:
            count_limit_refusal("resume_readers", self.labeler(tenant_id))
            raise TooManyReaders()
        place = _Place(self)  # taken before the awaits: concurrent arrivals see it
        try:
            events = await open_events()  # the owner check: another tenant's id is a 404
            ticket = await self._admit(tenant_id, limits)
        except BaseException:
            place.give_back()
            raise
        held = self._held(events, ticket, place)
        # A reader whose response never starts (its client gone before the first byte) is
        # never iterated, so its `finally` never runs: the place goes back when it is
        # collected, and its lease lapses within admission's lease time.
        weakref.finalize(held, place.give_back)
        return held

    async def _admit(self, tenant_id: UUID, limits: Mapping[str, int]) -> Ticket | None:
        if self.quotas is None or STREAM_LIMIT not in limits:
            return None
        try:
            return await self.quotas.admit(
                tenant_id,
                {STREAM_LIMIT: limits[STREAM_LIMIT]},
                request_id=f"resume-{uuid.uuid4().hex[:24]}",
                stream=True,
                estimated_tokens=0,
            )
        except RateLimited as refused:  # admission's words are about streams it runs
            raise RateLimited(
                refused.code,
                f"Too many resumed streams read at once: the plan allows "
                f"{limits[STREAM_LIMIT]} (concurrent_streams). Close one, or resume again "
                "after the time in Retry-After.",
                refused.headers,
            ) from None

    async def _held(
        self, events: AsyncIterator[bytes], ticket: Ticket | None, place: _Place
    ) -> AsyncIterator[bytes]:
        holding = self._holding(ticket)
        await holding.__aenter__()  # starts renewing the lease
        try:
            async for event in events:
                yield event
        finally:
            place.give_back()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:  # its `finally` (presence) runs now, not when collected
                await aclose()
            # Shielded: Litestar ends a stream whose client left by cancelling its scope,
            # which cancels every await here again; the lease's release must still happen.
            await asyncio.shield(holding.__aexit__(None, None, None))

    def _holding(self, ticket: Ticket | None) -> contextlib.AbstractAsyncContextManager[object]:
        if ticket is None or self.quotas is None:
            return contextlib.nullcontext()
        return self.quotas.hold(ticket)
