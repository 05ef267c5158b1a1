"""The soft alert: a budget's spend passed its alert share. An audit entry in the tenant's
log and, when `budget_webhook_url` is set, a JSON POST to it.

The spend script tells exactly one reservation per budget and period that it crossed the
threshold (a Redis flag set once), so every replica together alerts once. Noting never
waits: alerts go on a bounded queue that a background task drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.audit.service import record
from loraplex.control.budgets.money import BudgetLine, format_amount, period_reset
from loraplex.db.models import Tenant

log = logging.getLogger("loraplex.budgets")

BUDGET_ALERT = "budget.alert"  # the audit action
MAX_PENDING = 1000
WEBHOOK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Alert:
    """One budget whose spend passed its alert share."""

    tenant_id: UUID
    line: BudgetLine
    at: datetime

    def document(self, currency: str) -> dict[str, str]:
        """The alert as the audit entry's details and the webhook's body."""
        return {
            "event": BUDGET_ALERT,
            "tenant_id": str(self.tenant_id),
            "budget_id": self.line.id,
            "scope": self.line.scope.value,
            "subject_id": self.line.subject,
            "period": self.line.period.value,
            "amount": format_amount(self.line.amount),
            "alert_at": format_amount(self.line.alert_at()),
            "currency": currency,
            "resets_at": period_reset(self.line.period, self.at).isoformat(),
        }


class BudgetAlerts:
    """Notes alerts; `run()` writes and sends them (start it as a background task)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        currency: str,
        webhook_url: str = "",
    ) -> None:
        self.sessions, self.currency, self.webhook_url = sessions, currency, webhook_url
        self._queue: asyncio.Queue[Alert | None] = asyncio.Queue(MAX_PENDING)

    def note(self, tenant_id: UUID, lines: tuple[BudgetLine, ...]) -> None:
        """Queue an alert for each of `lines`; returns at once (drops when far behind)."""
        for line in lines:
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(Alert(tenant_id, line, datetime.now(UTC)))

    async def run(self) -> None:
        """Write and send alerts until `stop()`."""
        async with httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT_S) as client:
            while (alert := await self._queue.get()) is not None:
                await self._write(alert)
                if self.webhook_url:
                    await self._send(client, alert)

    async def stop(self) -> None:
        """End `run()` once what is queued is written."""
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    async def _write(self, alert: Alert) -> None:
        try:
            async with self.sessions() as session:
                tenant = await session.get(Tenant, alert.tenant_id)
                if tenant is None:
                    return
                details = alert.document(self.currency)
                del details["event"], details["tenant_id"]  # the entry's own fields
                record(session, "system", BUDGET_ALERT, tenant, tenant_id=tenant.id, **details)
                await session.commit()
        except Exception:  # the audit log must never take the API down with it
            log.exception("could not write a budget alert for tenant %s", alert.tenant_id)

    async def _send(self, client: httpx.AsyncClient, alert: Alert) -> None:
        try:
            response = await client.post(self.webhook_url, json=alert.document(self.currency))
            response.raise_for_status()
        except httpx.HTTPError as exc:  # the URL is the operator's; say which alert was lost
            log.warning("budget webhook failed for budget %s: %s", alert.line.id, exc)
