"""What the operator's views read: tenants searched and paged, the dashboard's tenant
summary, and the placement map with names a person knows (the audit log is `web.audit`).

A search arrives as the raw string of a GET form; `text_filter` (and paging.page_number)
turn it into a value or an `InvalidInput` (a 400 shown in the page) naming the field, never
a 500. A page past the last shows the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from sqlalchemy import Result, ScalarResult, Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import Adapter, AdapterVersion, Tenant
from loraplex.errors import InvalidInput
from loraplex.web.paging import Paging

TENANTS_PER_PAGE = 25
NEWEST_TENANTS = 5  # the dashboard's summary lists this many, newest first
MAX_FILTER_CHARS = 200  # longer than any slug, email or action the filters match
PLACED_VERSIONS = 50  # the dashboard's placement map shows the hottest this many


def text_filter(raw: str, field: str) -> str:
    """A GET form's text filter, trimmed; InvalidInput when it is longer than any it matches."""
    value = raw.strip()
    if len(value) > MAX_FILTER_CHARS:
        raise InvalidInput(f"{field} is longer than {MAX_FILTER_CHARS} characters", param=field)
    return value


async def count_rows(session: AsyncSession, query: Select[Any]) -> int:
    total = await session.scalar(select(func.count()).select_from(query.subquery()))
    return int(total or 0)


@dataclass(frozen=True)
class TenantList:
    """One page of tenants whose name or slug contains `q`, by name."""

    tenants: list[Tenant]
    q: str
    paging: Paging

    def link(self, page: int) -> str:
        """The query string of another page of the same search."""
        return urlencode({"q": self.q, "page": page} if self.q else {"page": page})


async def tenant_list(
    session: AsyncSession, q: str, page: int, per_page: int = TENANTS_PER_PAGE
) -> TenantList:
    """Tenants whose name or slug contains `q` (any case), one page of them by name."""
    q = text_filter(q, "q")
    query = select(Tenant.id)
    if q:
        query = query.where(
            or_(
                Tenant.name.icontains(q, autoescape=True), Tenant.slug.icontains(q, autoescape=True)
            )
        )
    paging = Paging.of(page, per_page, await count_rows(session, query))
    rows: ScalarResult[Tenant] = await session.scalars(
        select(Tenant)
        .where(Tenant.id.in_(query.scalar_subquery()))
        .order_by(func.lower(Tenant.name), Tenant.slug)
        .offset(paging.offset)
        .limit(per_page)
    )
    return TenantList(list(rows.unique().all()), q, paging)


@dataclass(frozen=True)
class TenantSummary:
    """The dashboard's tenant figures: how many in each status, and the newest few."""

    total: int
    by_status: dict[str, int]
    newest: list[Tenant]


async def tenant_summary(session: AsyncSession, newest: int = NEWEST_TENANTS) -> TenantSummary:
    """Tenants counted by status, and the `newest` most recently made."""
    counts: Result[str, int] = await session.execute(
        select(Tenant.status, func.count()).group_by(Tenant.status)
    )
    by_status = {str(status): int(n) for status, n in counts.all()}
    rows: ScalarResult[Tenant] = await session.scalars(
        select(Tenant).order_by(Tenant.created_at.desc()).limit(newest)
    )
    return TenantSummary(sum(by_status.values()), by_status, list(rows.unique().all()))


async def version_labels(session: AsyncSession, version_ids: list[str]) -> dict[str, str]:
    """`tenant/adapter v<n>` for each placed version id the database still knows."""
    ids = []
    for raw in version_ids:
        try:
            ids.append(UUID(str(raw)))
        except ValueError:  # a name Loraplex did not make: shown by its id
            continue
    if not ids:
        return {}
    rows = await session.execute(
        select(AdapterVersion.id, AdapterVersion.number, Adapter.name, Tenant.slug)
        .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
        .join(Tenant, Tenant.id == Adapter.tenant_id)
        .where(AdapterVersion.id.in_(ids))
    )
    return {str(vid): f"{slug}/{name} v{number}" for vid, number, name, slug in rows.all()}


def engine_slots(snapshot: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The placement map's engines by name: slots used, requests running and queued."""
    return {str(e["name"]): e for e in (snapshot or {}).get("engines", [])}


def waiting_adapters(snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every engine's adapters waiting for a load or a GPU slot, longest waiting first."""
    rows = [
        {**row, "engine": engine["name"]}
        for engine in (snapshot or {}).get("engines", [])
        for row in engine.get("waiting", [])
    ]
    return sorted(rows, key=lambda row: -float(row["waiting_s"]))
