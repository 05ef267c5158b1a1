"""Usage reports: stored per-minute counters summed into minute, hour or day buckets."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import BigInteger, ColumnElement, Select, cast, func, literal_column, select
from sqlalchemy import type_coerce as coerce

from loraplex.control.usage.schemas import GroupBy, UsageBucketOut, UsageReportOut, UsageTotalsOut
from loraplex.db.models.usage import BASE_MODEL_VERSION, COUNTERS, Usage
from loraplex.errors import InvalidInput

DEFAULT_RANGE = timedelta(hours=24)
MAX_RANGE = timedelta(days=31)
# A month of minutes across many models would be a response of hundreds of megabytes.
MAX_BUCKETS = 50_000
_KEYS = (Usage.tenant_id, Usage.model, Usage.adapter_version_id)


def report_window(
    start: datetime | None, end: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """The [start, end) a report covers: defaults to the last 24 hours, at most 31 days."""
    end = _as_utc(end) if end is not None else now
    start = _as_utc(start) if start is not None else end - DEFAULT_RANGE
    if end <= start:
        raise InvalidInput("end must be after start", param="end")
    if end - start > MAX_RANGE:
        raise InvalidInput("a usage report spans at most 31 days", param="start")
    return start, end


def _as_utc(moment: datetime) -> datetime:
    """A naive datetime in a query is taken as UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def bucket_start(dialect: str, group_by: GroupBy) -> ColumnElement[datetime]:
    """SQL for the start of the bucket holding `usage.minute`, in UTC."""
    if group_by is GroupBy.MINUTE:
        return Usage.minute
    # Literal SQL, not bound parameters: PostgreSQL matches GROUP BY to the select list by
    # expression, and `date_trunc($1, ...)` never equals `date_trunc($4, ...)`.
    if dialect == "postgresql":
        # date_trunc on timestamptz cuts days in the session's time zone; convert to UTC first.
        utc = func.timezone(literal_column("'UTC'"), Usage.minute)
        expr = func.date_trunc(literal_column(f"'{group_by.value}'"), utc)
    else:
        pattern = "%Y-%m-%d %H:00:00" if group_by is GroupBy.HOUR else "%Y-%m-%d 00:00:00"
        expr = func.strftime(literal_column(f"'{pattern}'"), Usage.minute)
    return coerce(expr, DateTimeUTC(timezone=True))


class UsageService(SQLAlchemyAsyncRepositoryService[Usage]):
    """Reads aggregated usage (the gateway's `UsageRecorder` writes it)."""

    class Repo(SQLAlchemyAsyncRepository[Usage]):
        """Usage rows."""

        model_type = Usage

    repository_type = Repo

    async def report(
        self,
        start: datetime | None,
        end: datetime | None,
        group_by: GroupBy,
        *,
        tenant_id: UUID | None = None,
        model: str | None = None,
    ) -> UsageReportOut:
        """Usage in the window, per bucket, tenant, model and version; oldest bucket first."""
        start, end = report_window(start, end, datetime.now(UTC))
        session = self.repository.session
        stmt = _report_query(session.get_bind().dialect.name, group_by, start, end)
        if tenant_id is not None:
            stmt = stmt.where(Usage.tenant_id == tenant_id)
        if model is not None:
            stmt = stmt.where(Usage.model == model)
        rows = (await session.execute(stmt.limit(MAX_BUCKETS + 1))).all()
        if len(rows) > MAX_BUCKETS:
            raise InvalidInput(
                f"the report would have over {MAX_BUCKETS} buckets: narrow the range, "
                "filter by model or group by a wider bucket",
                param="group_by",
            )
        buckets = [_bucket_out(row._mapping) for row in rows]
        return UsageReportOut(
            start=start, end=end, group_by=group_by, buckets=buckets, totals=_totals(buckets)
        )


def _report_query(dialect: str, group_by: GroupBy, start: datetime, end: datetime) -> Select[Any]:
    bucket = bucket_start(dialect, group_by)
    # sum(bigint) is numeric on PostgreSQL, which asyncpg hands back as Decimal.
    sums = [cast(func.sum(getattr(Usage, name)), BigInteger).label(name) for name in COUNTERS]
    return (
        select(bucket.label("time"), *_KEYS, *sums)
        .where(Usage.minute >= start, Usage.minute < end)
        .group_by(bucket, *_KEYS)
        .order_by(bucket, *_KEYS)
    )


def _bucket_out(row: Any) -> UsageBucketOut:
    version = row["adapter_version_id"]
    return UsageBucketOut(
        time=row["time"],
        tenant_id=row["tenant_id"],
        model=row["model"],
        adapter_version_id=None if version == BASE_MODEL_VERSION else version,
        total_tokens=row["prompt_tokens"] + row["completion_tokens"],
        **{name: int(row[name]) for name in COUNTERS},
    )


def _totals(buckets: Sequence[UsageBucketOut]) -> UsageTotalsOut:
    fields = (*COUNTERS, "total_tokens")
    return UsageTotalsOut(**{name: sum(getattr(b, name) for b in buckets) for name in fields})
