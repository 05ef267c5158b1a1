"""The audit log as the console and the admin UI show it: filtered by actor, action, UTC
dates and (for operators) tenant, paged, newest first.

Filters arrive as the raw strings of a GET form; `audit_filter` turns them into values or an
`InvalidInput` naming the field, which `audit_page` shows in the page as a 400 with the form
as typed, never a 500. A tenant's own page passes `within`, so it sees its entries only,
whatever the query says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode
from uuid import UUID

from litestar.di import Provide
from litestar.params import QueryParameter
from litestar.response import Template
from sqlalchemy import ColumnElement, Result, ScalarResult, and_, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import AuditEntry, Tenant
from loraplex.errors import InvalidInput
from loraplex.web.admin_reads import count_rows, text_filter
from loraplex.web.paging import Paging, page_number

AUDIT_PER_PAGE = 50


def provide_typed_filters(
    actor: str = "",
    action: str = "",
    since: Annotated[str, QueryParameter(name="from")] = "",
    until: Annotated[str, QueryParameter(name="to")] = "",
) -> dict[str, str]:
    """Dependency `typed`: the audit form's filters as typed, each possibly empty."""
    return {"actor": actor, "action": action, "from": since, "to": until}


TYPED_FILTERS = {"typed": Provide(provide_typed_filters, sync_to_thread=False)}


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
        tenant=text_filter(tenant, "tenant"),
        actor=text_filter(actor, "actor"),
        action=text_filter(action, "action"),
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


async def audit_actions(session: AsyncSession, within: UUID | None = None) -> list[str]:
    """Every action the log has recorded (of one tenant's, with `within`), for the action
    field's suggestions."""
    query = select(AuditEntry.action).distinct().order_by(AuditEntry.action)
    if within is not None:
        query = query.where(AuditEntry.tenant_id == within)
    rows: ScalarResult[str] = await session.scalars(query)
    return list(rows.all())


async def audit_log(
    session: AsyncSession,
    wanted: AuditFilter,
    within: UUID | None = None,
    per_page: int = AUDIT_PER_PAGE,
) -> AuditLog:
    """The entries `wanted` matches (only tenant `within`'s, when given), one page of them,
    newest first."""
    conditions = await _audit_conditions(session, wanted)
    if within is not None:
        conditions.append(AuditEntry.tenant_id == within)
    where = and_(true(), *conditions)
    total = await count_rows(session, select(AuditEntry.id).where(where))
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


async def audit_page(
    session: AsyncSession,
    template: str,
    typed: dict[str, str],
    page_asked: str,
    within: UUID | None = None,
) -> Template:
    """The audit page for the filters `typed` (tenant, actor, action, from, to), or the page
    again as a 400 naming the filter that cannot be read."""
    context: dict[str, Any] = {"typed": typed, "actions": await audit_actions(session, within)}
    try:
        wanted = audit_filter(
            tenant=typed.get("tenant", ""),
            actor=typed["actor"],
            action=typed["action"],
            since=typed["from"],
            until=typed["to"],
            page=page_asked,
        )
        context["log"] = await audit_log(session, wanted, within)
    except InvalidInput as exc:
        return Template(template, context={**context, "refused": exc.detail}, status_code=400)
    return Template(template, context=context)
