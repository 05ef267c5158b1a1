"""Keeping a request's concurrency leases alive while it runs.

A slot is a member of a per-tenant sorted set scored by its expiry. The admitting replica
renews it every `lease_s / 3`, so two renewals can fail before it lapses. A replica that
dies (kill -9, OOM, lost network) stops renewing, and the next admit after `lease_s` prunes
the dead member — no slot outlives its holder by more than one lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from loraplex.gateway.admission.ticket import Ticket

log = logging.getLogger("loraplex.gateway.admission")

RENEWALS_PER_LEASE = 3


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
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin renewing (a no-op for a ticket without leases)."""
        if self.ticket.lease_keys and not self.ticket.degraded:
            self._task = asyncio.create_task(self._run(), name=f"lease:{self.ticket.request_id}")

    async def stop(self) -> None:
        """Stop renewing; the caller releases the leases."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                renewed = await self._renew(self.ticket)
            except (RedisError, OSError, TimeoutError) as exc:
                # Keep going: a short outage is survived as long as one renewal lands
                # within the lease.
                log.warning("lease renewal of %s failed: %s", self.ticket.request_id, exc)
                continue
            if renewed < len(self.ticket.lease_keys) and not self.lost:
                # The request keeps running (cutting it would waste the work done); the
                # tenant may briefly exceed its concurrency by this one request.
                self.lost = True
                log.warning(
                    "lease of %s expired before renewal (event loop stalled over %.1fs?)",
                    self.ticket.request_id,
                    self.interval_s * RENEWALS_PER_LEASE,
                )
