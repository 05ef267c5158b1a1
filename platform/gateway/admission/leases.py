"""Keeping a request's concurrency leases alive while it runs.

A slot is a member of a per-tenant sorted set scored by its expiry. The admitting replica
renews it every `lease_s / 3`, so two renewals can fail before it lapses. A replica that
dies (kill -9, OOM, lost network) stops renewing, and the next admit after `lease_s` prunes
the dead member — no slot outlives its holder by more than one lease.

Stopping must never wait on Redis: the request's response ends only after its leases are
let go. So the loop exits on a stop event it checks after every await, and `stop` waits
for it at most `STOP_WAIT_S` — a cancellation swallowed inside a Redis call (seen under
load with redis-py's own socket timeout racing ours) can no longer keep a renewal loop,
and with it a finished stream, alive forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from loraplex.gateway.admission.ticket import Ticket

log = logging.getLogger("loraplex.gateway.admission")

RENEWALS_PER_LEASE = 3
STOP_WAIT_S = 1.0


class LeaseRenewer:
    """Renews one ticket's leases in the background until stopped."""

    def __init__(
        self,
        ticket: Ticket,
        renew: Callable[[Ticket], Awaitable[int]],
        lease_s: float,
    ):
        self.ticket, self._renew, self.interval_s = ticket, renew, lease_s / RENEWALS_PER_LEASE
        self.lost = False  # a lease had already expired: its slot may belong to someone else
        self._timer: asyncio.TimerHandle | None = None  # until the first renewal is due
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        """Begin renewing (a no-op for a ticket without leases).

        Nothing runs until the first renewal is due: most requests end within
        `interval_s`, and they cost one timer, not a task (issue #50's per-request work)."""
        if self.ticket.lease_keys and not self.ticket.degraded:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._begin)

    def _begin(self) -> None:
        self._timer = None
        if not self._stopping.is_set():
            self._task = asyncio.create_task(self._run(), name=f"lease:{self.ticket.request_id}")

    async def stop(self) -> None:
        """Stop renewing; the caller releases the leases."""
        self._stopping.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # asyncio.wait neither raises the task's outcome nor swallows our own cancellation.
        await asyncio.wait({task}, timeout=STOP_WAIT_S)

    async def _run(self) -> None:
        while not self._stopping.is_set():  # a renewal is due (the timer or the wait below)
            try:
                renewed = await self._renew(self.ticket)
            except (RedisError, OSError, TimeoutError) as exc:
                if self._stopping.is_set():
                    return
                # Keep going: a short outage is survived as long as one renewal lands
                # within the lease.
                log.warning("lease renewal of %s failed: %s", self.ticket.request_id, exc)
                renewed = len(self.ticket.lease_keys)
            if renewed < len(self.ticket.lease_keys) and not self.lost:
                # The request keeps running (cutting it would waste the work done); the
                # tenant may briefly exceed its concurrency by this one request.
                self.lost = True
                log.warning(
                    "lease of %s expired before renewal (event loop stalled over %.1fs?)",
                    self.ticket.request_id,
                    self.interval_s * RENEWALS_PER_LEASE,
                )
            try:
                async with asyncio.timeout(self.interval_s):
                    await self._stopping.wait()
                return
            except TimeoutError:
                pass  # time to renew again
