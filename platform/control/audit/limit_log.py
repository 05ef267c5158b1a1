"""Which tenant tripped which limit: limit refusals noted in the tenant's audit log.

Every refusal reaches the client through the one exception mapper (`loraplex.errors`), which
hands the limit ones (413, 429, quota, body and schema complexity, refused uploads) to
`LimitLog.note`. Noting never waits: the entry goes on a bounded queue that a background
task writes in batches, and one (tenant, limit) pair is written at most once a `window_s`,
with how many refusals it stands for, so an attacker's thousand 429s a minute are one line.
A refusal that recorded its own entry (fine-tuning limits, in the request's transaction)
is marked `audited` and skipped here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.audit.service import record
from loraplex.db.models import Tenant
from loraplex.observability.metrics import TenantLabeler

log = logging.getLogger("loraplex.audit")

LIMIT_REFUSED = "tenant.limit_refused"  # the audit action of every limit refusal
WINDOW_S = 60.0
MAX_PENDING = 1000


@dataclass
class _Pending:
    tenant_id: UUID
    actor: str
    limit: str
    message: str
    refusals: int = 1


class LimitLog:
    """Notes limit refusals; `run()` writes them (start it as a background task)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sessions, self.window_s, self.clock = sessions, window_s, clock
        self._last: dict[tuple[UUID, str], float] = {}
        self._open: dict[tuple[UUID, str], _Pending] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self.label = TenantLabeler()  # the metric's tenant label, bounded in count

    def note(self, tenant_id: UUID, actor: str, limit: str, message: str) -> None:
        """Note one refusal of `tenant_id` by `limit`; returns at once."""
        key = (tenant_id, limit)
        if key in self._open:
            self._open[key].refusals += 1
            return
        if len(self._open) >= MAX_PENDING:
            return  # the writer is behind: the metric still counts every refusal
        self._open[key] = _Pending(tenant_id, actor, limit, message[:500])
        self._wake.set()

    async def run(self) -> None:
        """Write what is due until stopped; each (tenant, limit) once a window."""
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.window_s / 10)
            self._wake.clear()
            due = self._due()
            if due:
                await self._write(due)

    async def stop(self) -> None:
        """Write what is due, then end `run()`."""
        self._stopping = True
        due = self._due()
        if due:
            await self._write(due)
        self._wake.set()

    def _due(self) -> list[_Pending]:
        now, due = self.clock(), []
        # Forget windows that have passed, so the map holds only the last minute's pairs.
        self._last = {k: t for k, t in self._last.items() if now - t < self.window_s}
        for key in list(self._open):
            if now - self._last.get(key, -self.window_s) >= self.window_s:
                due.append(self._open.pop(key))
                self._last[key] = now
        return due

    async def _write(self, entries: list[_Pending]) -> None:
        try:
            async with self.sessions() as session:
                for entry in entries:
                    tenant = await session.get(Tenant, entry.tenant_id)
                    if tenant is None:
                        continue
                    record(
                        session, entry.actor, LIMIT_REFUSED, tenant,
                        tenant_id=entry.tenant_id, limit=entry.limit,
                        message=entry.message, refusals=entry.refusals,
                    )  # fmt: skip
                await session.commit()
        except Exception:  # the audit log must never take the API down with it
            log.exception("could not write %d limit refusals to the audit log", len(entries))
