"""What the operator's views read: tenants searched and paged, the audit log filtered and
paged, the dashboard's tenant summary, and the placement map with names a person knows.

Filters arrive as the raw strings of a GET form; `audit_filter` (and paging.page_number)
turn them into values or an `InvalidInput` (a 400 shown in the page) naming the field,
never a 500. A page past the last shows the last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from sqlalchemy import ColumnElement, Result, ScalarResult, Select, and_, func, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import Adapter, AdapterVersion, AuditEntry, Tenant
from loraplex.errors import InvalidInput
from loraplex.web.paging import Paging, page_number

TENANTS_PER_PAGE = 25
AUDIT_PER_PAGE = 50
NEWEST_TENANTS = 5  # the dashboard's summary lists this many, newest first
MAX_FILTER_CHARS = 200  # longer than any slug, email or action the filters match
PLACED_VERSIONS = 50  # the dashboard's placement map shows the hottest this many


def _text(raw: str, field: str) -> str:
    value = raw.strip()
    if len(value) > MAX_FILTER_CHARS:
        raise InvalidInput(f"{field} is longer than {MAX_FILTER_CHARS} characters", param=field)
    return value


async def _count(session: AsyncSession, query: Select[Any]) -> int:
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
    q = _text(q, "q")
    query = select(Tenant.id)
    if q:
        query = query.where(
            or_(
                Tenant.name.icontains(q, autoescape=True), Tenant.slug.icontains(q, autoescape=True)
            )
        )
    paging = Paging.of(page, per_page, await _count(session, query))
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


@dataclass(frozen=True)
class AuditFilter:
    """What the audit page was asked for; empty strings and None match everything."""

    tenant: str = ""  # a tenant's slug or id
    actor: str = ""  # contained in the actor, any case ("user:ops@", "key:", "cli")
    action: str = ""  # an action ("tenant.create") or a family of them ("tenant")
    since: date | None = None  # from the start of this UTC day
    until: date | None = None  # to the end of this UTC day
    page: int = 1

    def link(self, page: int) -> str:
        """The query string of another page with the same filters."""
        fields = {
            "tenant": self.tenant,
            "actor": self.actor,
            "action": self.action,
            "from": self.since.isoformat() if self.since else "",
            "to": self.until.isoformat() if self.until else "",
        }
        return urlencode({**{k: v for k, v in fields.items() if v}, "page": page})


def _day(raw: str, field: str) -> date | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(
            f"{field} must be a date written YYYY-MM-DD, not '{raw[:20]}'", param=field
        ) from None


def audit_filter(
    *, tenant: str, actor: str, action: str, since: str, until: str, page: str
) -> AuditFilter:
    """The audit page's filters from its GET form; InvalidInput naming the first bad one."""
    parsed = AuditFilter(
        tenant=_text(tenant, "tenant"),
        actor=_text(actor, "actor"),
        action=_text(action, "action"),
        since=_day(since, "from"),
        until=_day(until, "to"),
    )
    if parsed.since and parsed.until and parsed.since > parsed.until:
        raise InvalidInput("from must not be after to", param="from")
    return replace(parsed, page=page_number(page))


@dataclass(frozen=True)
class AuditRow:
    """One audit entry, with its tenant's slug (None: no tenant, or one since purged)."""

    entry: AuditEntry
    tenant: str | None

    @property
    def details(self) -> str:
        """The entry's details as one line of JSON ("" when it has none)."""
        return (
            json.dumps(self.entry.details, sort_keys=True, default=str)
            if self.entry.details
            else ""
        )


@dataclass(frozen=True)
class AuditLog:
    """One page of the audit entries a filter matches, newest first."""

    rows: list[AuditRow]
    filter: AuditFilter
    paging: Paging


async def audit_actions(session: AsyncSession) -> list[str]:
    """Every action the log has recorded, for the action field's suggestions."""
    rows: ScalarResult[str] = await session.scalars(
        select(AuditEntry.action).distinct().order_by(AuditEntry.action)
    )
    return list(rows.all())


async def audit_log(
    session: AsyncSession, wanted: AuditFilter, per_page: int = AUDIT_PER_PAGE
) -> AuditLog:
    """The entries `wanted` matches, one page of them, newest first."""
    where = and_(true(), *await _audit_conditions(session, wanted))
    total = await _count(session, select(AuditEntry.id).where(where))
    paging = Paging.of(wanted.page, per_page, total)
    rows: Result[AuditEntry, str | None] = await session.execute(
        select(AuditEntry, Tenant.slug)
        .outerjoin(Tenant, Tenant.id == AuditEntry.tenant_id)
        .where(where)
        .order_by(AuditEntry.created_at.desc(), AuditEntry.id.desc())
        .offset(paging.offset)
        .limit(per_page)
    )
    return AuditLog([AuditRow(entry, slug) for entry, slug in rows.all()], wanted, paging)


async def _audit_conditions(
    session: AsyncSession, wanted: AuditFilter
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if wanted.tenant:
        conditions.append(AuditEntry.tenant_id == await _tenant_id(session, wanted.tenant))
    if wanted.actor:
        conditions.append(AuditEntry.actor.icontains(wanted.actor, autoescape=True))
    if wanted.action:  # "tenant" matches tenant.create, tenant.update, ...
        conditions.append(
            or_(
                AuditEntry.action == wanted.action,
                AuditEntry.action.startswith(f"{wanted.action}.", autoescape=True),
            )
        )
    if wanted.since:
        conditions.append(AuditEntry.created_at >= datetime.combine(wanted.since, time(), UTC))
    if wanted.until and wanted.until < date.max:  # to the last day there is: no upper bound
        end = datetime.combine(wanted.until + timedelta(days=1), time(), UTC)
        conditions.append(AuditEntry.created_at < end)
    return conditions


async def _tenant_id(session: AsyncSession, slug_or_id: str) -> UUID:
    """The tenant a filter names by slug or id; 400 when there is none."""
    try:
        return UUID(slug_or_id)
    except ValueError:
        pass
    found: UUID | None = await session.scalar(
        select(Tenant.id).where(Tenant.slug == slug_or_id.lower())
    )
    if found is None:
        raise InvalidInput(f"no tenant has the slug '{slug_or_id[:63]}'", param="tenant")
    return found


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
