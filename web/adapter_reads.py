"""What the adapters index and one adapter's page read from the database.

The index is a searchable, paged list of summaries (three queries per page, whatever its
size); the page adds where each version came from and the adapter's traffic over a day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.adapters.schemas import VersionOut
from loraplex.control.adapters.versions import VersionService
from loraplex.control.usage.schemas import GroupBy, UsageBucketOut
from loraplex.control.usage.service import UsageService
from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, BaseModel
from loraplex.finetune.ids import JOB, public
from loraplex.web import reads
from loraplex.web.charts import BarChart, bar_chart
from loraplex.web.paging import Paging

PAGE_SIZE = 12  # adapter cards per index page
USAGE_HOURS = 24  # the adapter page's charts


@dataclass(frozen=True)
class AliasSummary:
    """An alias as the index card names it: `prod → v2 (canary v3 10%)`."""

    name: str
    version: int
    canary_version: int | None
    canary_weight: int
    pinned: bool


@dataclass(frozen=True)
class AdapterSummary:
    """One card of the index."""

    name: str
    base_model: str
    latest_version: int | None  # the highest version number, whatever its status
    latest_status: str | None
    aliases: list[AliasSummary]


@dataclass(frozen=True)
class AdapterIndex:
    """One page of the tenant's adapters matching `q`, by name."""

    items: list[AdapterSummary]
    q: str
    paging: Paging

    def link(self, page: int) -> str:
        """The query string of another page of the same search."""
        return urlencode({"q": self.q, "page": page} if self.q else {"page": page})


async def adapter_index(
    session: AsyncSession, tenant_id: UUID, q: str = "", page: int = 1
) -> AdapterIndex:
    """The page'th `PAGE_SIZE` adapters whose name or base model contains `q` (any case);
    a page past the end shows the last one."""
    query = select(Adapter).join(BaseModel).where(Adapter.tenant_id == tenant_id)
    if q:
        query = query.where(
            or_(
                Adapter.name.icontains(q, autoescape=True),
                BaseModel.name.icontains(q, autoescape=True),
            )
        )
    total = int(await session.scalar(select(func.count()).select_from(query.subquery())) or 0)
    paging = Paging.of(page, PAGE_SIZE, total)
    adapters = (
        await session.scalars(query.order_by(Adapter.name).offset(paging.offset).limit(PAGE_SIZE))
    ).all()
    ids = [a.id for a in adapters]
    latest = await _latest_versions(session, ids)
    aliases = await _alias_summaries(session, ids)
    items = [
        AdapterSummary(
            a.name,
            a.base_model.name,
            *latest.get(a.id, (None, None)),
            aliases.get(a.id, []),
        )
        for a in adapters
    ]
    return AdapterIndex(items, q, paging)


async def _latest_versions(
    session: AsyncSession, adapter_ids: list[UUID]
) -> dict[UUID, tuple[int, str]]:
    newest = (
        select(AdapterVersion.adapter_id, func.max(AdapterVersion.number).label("number"))
        .where(AdapterVersion.adapter_id.in_(adapter_ids))
        .group_by(AdapterVersion.adapter_id)
        .subquery()
    )
    rows = await session.execute(
        select(AdapterVersion.adapter_id, AdapterVersion.number, AdapterVersion.status).join(
            newest,
            (newest.c.adapter_id == AdapterVersion.adapter_id)
            & (newest.c.number == AdapterVersion.number),
        )
    )
    return {row.adapter_id: (row.number, str(row.status)) for row in rows}


async def _alias_summaries(
    session: AsyncSession, adapter_ids: list[UUID]
) -> dict[UUID, list[AliasSummary]]:
    numbers = (
        await session.execute(
            select(AdapterVersion.id, AdapterVersion.number).where(
                AdapterVersion.adapter_id.in_(adapter_ids)
            )
        )
    ).all()
    number_of = {row.id: row.number for row in numbers}
    rows = await session.scalars(
        select(AdapterAlias)
        .where(AdapterAlias.adapter_id.in_(adapter_ids))
        .order_by(AdapterAlias.name != "prod", AdapterAlias.name)
    )
    out: dict[UUID, list[AliasSummary]] = {}
    for alias in rows:
        out.setdefault(alias.adapter_id, []).append(
            AliasSummary(
                alias.name,
                number_of.get(alias.version_id, 0),
                number_of.get(alias.canary_version_id) if alias.canary_version_id else None,
                alias.canary_weight,
                alias.pinned,
            )
        )
    return out


async def adapter_versions(session: AsyncSession, adapter: Adapter) -> list[VersionOut]:
    """The adapter's versions, newest first (the placement fragment's rows; no aliases)."""
    rows = await session.scalars(
        select(AdapterVersion)
        .where(AdapterVersion.adapter_id == adapter.id)
        .order_by(AdapterVersion.number.desc())
    )
    return [VersionService.to_out(adapter, v) for v in rows.all()]


async def card_context(session: AsyncSession, adapter: Adapter) -> dict[str, Any]:
    """What `console/_adapter.html` needs: the card, and the fine-tune job (public id) that
    made each version that came from one, by version number."""
    card = await reads.adapter_card(session, adapter)
    rows = await session.execute(
        select(AdapterVersion.number, AdapterVersion.job_id).where(
            AdapterVersion.adapter_id == adapter.id, AdapterVersion.job_id.is_not(None)
        )
    )
    return {"card": card, "jobs": {row.number: public(JOB, row.job_id) for row in rows}}


@dataclass(frozen=True)
class AdapterTraffic:
    """The adapter's requests, tokens and errors per hour over the last day."""

    requests: BarChart
    tokens: BarChart
    errors: BarChart
    total_requests: int
    total_tokens: int
    total_errors: int


async def adapter_traffic(
    session: AsyncSession, adapter: Adapter, now: datetime | None = None
) -> AdapterTraffic:
    """Usage of any version of the adapter, or of a model id naming it (a request refused
    before it found a version still counts as the adapter's error)."""
    now = now or datetime.now(UTC)
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=USAGE_HOURS - 1)
    report = await UsageService(session=session).report(
        start, now, GroupBy.HOUR, tenant_id=adapter.tenant_id
    )
    version_ids = set(
        (
            await session.scalars(
                select(AdapterVersion.id).where(AdapterVersion.adapter_id == adapter.id)
            )
        ).all()
    )
    mine = [
        b
        for b in report.buckets
        if b.adapter_version_id in version_ids or b.model.partition("@")[0] == adapter.name
    ]
    hours = [start + timedelta(hours=i) for i in range(USAGE_HOURS)]
    series = {name: _hourly(mine, hours, name) for name in ("requests", "total_tokens", "errors")}
    return AdapterTraffic(
        requests=bar_chart(series["requests"]),
        tokens=bar_chart(series["total_tokens"]),
        errors=bar_chart(series["errors"]),
        total_requests=sum(b.requests for b in mine),
        total_tokens=sum(b.total_tokens for b in mine),
        total_errors=sum(b.errors for b in mine),
    )


def _hourly(
    buckets: list[UsageBucketOut], hours: list[datetime], counter: str
) -> list[tuple[str, int]]:
    """`counter` summed per hour, zero for hours without usage."""
    sums: dict[datetime, int] = {}
    for bucket in buckets:
        moment = bucket.time if bucket.time.tzinfo else bucket.time.replace(tzinfo=UTC)
        sums[moment] = sums.get(moment, 0) + int(getattr(bucket, counter))
    return [(f"{hour:%H:00}", sums.get(hour, 0)) for hour in hours]
