"""The spend report: stored spend rows of one tenant, by day, model, key and adapter, with
totals by model, key, day and kind (inference, eval, training), as JSON or CSV."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.budgets.money import format_amount
from loraplex.control.budgets.schemas import SpendReportOut, SpendRowOut, SpendTotal
from loraplex.control.usage.service import report_window
from loraplex.db.models import ApiKey, Spend
from loraplex.db.models.budgets import NOBODY
from loraplex.errors import InvalidInput

DEFAULT_RANGE = timedelta(days=30)
MAX_ROWS = 50_000  # a month of days x models x keys x adapters; more is a narrower query
CSV_COLUMNS = (
    "day", "model", "base_model", "api_key", "adapter_id", "kind", "requests",
    "prompt_tokens", "completion_tokens", "training_tokens", "amount", "currency",
)  # fmt: skip


async def spend_report(
    session: AsyncSession,
    tenant_id: UUID,
    currency: str,
    start: datetime | None = None,
    end: datetime | None = None,
) -> SpendReportOut:
    """The tenant's spend in [start, end) (default: the last 30 days), newest day first."""
    now = datetime.now(UTC)
    if start is None and end is None:
        start = now - DEFAULT_RANGE
    start, end = report_window(start, end, now)
    rows = (
        await session.execute(
            select(Spend)
            .where(Spend.tenant_id == tenant_id, Spend.day >= _day(start), Spend.day < end)
            .order_by(Spend.day.desc(), Spend.model, Spend.api_key_id, Spend.adapter_id)
            .limit(MAX_ROWS + 1)
        )
    ).scalars()
    stored = list(rows)
    if len(stored) > MAX_ROWS:
        raise InvalidInput(f"the report would have over {MAX_ROWS} rows: narrow the range")
    prefixes = await _key_prefixes(session, {r.api_key_id for r in stored} - {NOBODY})
    return SpendReportOut(
        start=start,
        end=end,
        currency=currency,
        total=format_amount(sum(r.amount_micros for r in stored)),
        rows=[_row_out(row) for row in stored],
        by_model=_totals(stored, lambda r: r.model),
        by_key=_totals(stored, lambda r: _key_name(r.api_key_id, prefixes)),
        by_day=_totals(stored, lambda r: r.day.date().isoformat()),
        by_kind=_totals(stored, lambda r: r.kind),
    )


def report_csv(report: SpendReportOut) -> str:
    """The report's rows as CSV, one line per day, model, key, adapter and kind."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in report.rows:
        writer.writerow([
            r.day.date().isoformat(), _cell(r.model), _cell(r.base_model),
            r.api_key_id or "", r.adapter_id or "", r.kind, r.requests, r.prompt_tokens,
            r.completion_tokens, r.training_tokens, r.amount, report.currency,
        ])  # fmt: skip
    return out.getvalue()


def _cell(text: str) -> str:
    """A tenant-chosen name made inert for spreadsheets (no formula on open)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _row_out(row: Spend) -> SpendRowOut:
    return SpendRowOut(
        day=row.day,
        model=row.model,
        base_model=row.base_model,
        api_key_id=None if row.api_key_id == NOBODY else row.api_key_id,
        adapter_id=None if row.adapter_id == NOBODY else row.adapter_id,
        kind=row.kind,
        requests=row.requests,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        training_tokens=row.training_tokens,
        amount=format_amount(row.amount_micros),
    )


async def _key_prefixes(session: AsyncSession, ids: set[UUID]) -> dict[UUID, str]:
    if not ids:
        return {}
    rows = await session.execute(select(ApiKey.id, ApiKey.prefix).where(ApiKey.id.in_(ids)))
    return {key_id: prefix for key_id, prefix in rows.all()}


def _key_name(key_id: UUID, prefixes: dict[UUID, str]) -> str:
    if key_id == NOBODY:
        return "(no key: fine-tuning)"
    return prefixes.get(key_id, str(key_id))


def _totals(rows: Iterable[Spend], name_of: Callable[[Spend], str]) -> list[SpendTotal]:
    requests: dict[str, int] = defaultdict(int)
    tokens: dict[str, int] = defaultdict(int)
    amounts: dict[str, int] = defaultdict(int)
    for row in rows:
        requests[name_of(row)] += row.requests
        tokens[name_of(row)] += row.prompt_tokens + row.completion_tokens + row.training_tokens
        amounts[name_of(row)] += row.amount_micros
    ranked = sorted(amounts, key=lambda name: (-amounts[name], name))
    return [
        SpendTotal(name=n, requests=requests[n], tokens=tokens[n], amount=format_amount(amounts[n]))
        for n in ranked
    ]
