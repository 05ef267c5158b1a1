"""What the console's pages show, read from the database in one place.

Handlers stay thin: each page asks one function here for its data, built from the same
services the `/api/v1` routes use, so the console and the API cannot disagree.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from advanced_alchemy.filters import OrderBy
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.principal import Scope
from loraplex.auth.secrets import BRAND
from loraplex.control.adapters.aliases import AliasService
from loraplex.control.adapters.schemas import AliasOut, VersionOut
from loraplex.control.adapters.versions import VersionService, stored_bytes
from loraplex.control.keys.schemas import KeyOut
from loraplex.control.keys.service import ApiKeyService
from loraplex.control.tenants.schemas import QuotaOut
from loraplex.control.tenants.service import TenantService
from loraplex.control.usage.schemas import GroupBy, UsageReportOut
from loraplex.control.usage.service import UsageService
from loraplex.db.models import (
    Adapter,
    AdapterAlias,
    AdapterVersion,
    ApiKey,
    AuditEntry,
    BaseModel,
    DatasetFile,
    ExternalIdentity,
    FineTuneJob,
    Plan,
    Spend,
    Tenant,
    TenantStatus,
    User,
    VersionStatus,
)
from loraplex.db.models.keys import EVAL_USAGE
from loraplex.finetune.ids import FILE, public
from loraplex.web.charts import BarChart, Meter, bar_chart

HOURS = 24  # the tenant overview's chart
MINUTES = 60  # the admin dashboard's chart


async def users(session: AsyncSession, tenant_id: UUID) -> list[User]:
    """Who can sign in to the tenant's console, by email."""
    rows = await session.scalars(
        select(User).where(User.tenant_id == tenant_id).order_by(User.email)
    )
    return list(rows.all())


async def sign_in_providers(session: AsyncSession, tenant_id: UUID) -> dict[UUID, str]:
    """The identity provider each of the tenant's single sign-on users signs in with."""
    rows = await session.execute(
        select(ExternalIdentity.user_id, ExternalIdentity.provider)
        .join(User, User.id == ExternalIdentity.user_id)
        .where(User.tenant_id == tenant_id)
    )
    return {user_id: provider for user_id, provider in rows.all()}


async def base_model_names(session: AsyncSession) -> list[str]:
    """Every base model's name, for the pickers of the adapter, fine-tune and engine forms."""
    return list((await session.scalars(select(BaseModel.name).order_by(BaseModel.name))).all())


async def plans_with_tenants(session: AsyncSession) -> list[tuple[Plan, int]]:
    """Every plan by name, with how many tenants (not deleted) are on it (operators)."""
    tenants_on = (
        select(Tenant.plan_id, func.count(Tenant.id).label("tenants"))
        .where(Tenant.status != TenantStatus.DELETED)
        .group_by(Tenant.plan_id)
        .subquery()
    )
    rows = await session.execute(
        select(Plan, func.coalesce(tenants_on.c.tenants, 0))
        .outerjoin(tenants_on, tenants_on.c.plan_id == Plan.id)
        .order_by(Plan.name)
    )
    return [(plan, int(count)) for plan, count in rows.all()]


@dataclass(frozen=True)
class ModelUsage:
    """One model id's share of a tenant's last 24 hours (as clients named it)."""

    model: str
    requests: int
    tokens: int
    errors: int
    percent: float  # of the tenant's tokens in the window


@dataclass(frozen=True)
class Overview:
    """The console's first page: the tenant, its quotas against use, and 24 h of tokens."""

    tenant: Tenant
    quota: QuotaOut
    meters: list[Meter]
    tokens_by_hour: BarChart
    requests_24h: int
    tokens_24h: int
    errors_24h: int
    by_model: list[ModelUsage]  # most tokens first
    eval_tokens_today: int = 0  # of "Tokens today": eval runs' (from spend, kind "eval")


@dataclass(frozen=True)
class AdapterCard:
    """One adapter with its versions (newest first) and aliases."""

    adapter: Adapter
    versions: list[VersionOut]
    aliases: list[AliasOut]

    @property
    def ready_numbers(self) -> list[int]:
        """Versions an alias may point at."""
        return [v.number for v in self.versions if v.status == "ready"]


async def overview(session: AsyncSession, tenant_id: UUID, now: datetime | None = None) -> Overview:
    """Quotas in force, what of them is used now, and tokens per hour over the last day."""
    now = now or datetime.now(UTC)
    tenants = TenantService(session=session)
    tenant = await tenants.visible(tenant_id)
    quota = await tenants.quota(tenant_id)
    hour = now.replace(minute=0, second=0, microsecond=0)
    start = hour - timedelta(hours=HOURS - 1)
    report = await UsageService(session=session).report(
        start, now, GroupBy.HOUR, tenant_id=tenant_id
    )
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    today = sum(b.total_tokens for b in report.buckets if b.time >= day_start)
    adapters = await session.scalar(
        select(func.count()).select_from(Adapter).where(Adapter.tenant_id == tenant_id)
    )
    limits = quota.effective
    meters = [
        Meter("Tokens today (UTC)", today, limits.get("daily_tokens")),
        Meter("Adapters", int(adapters or 0), limits.get("max_adapters")),
        Meter(
            "Adapter storage (bytes)",
            await stored_bytes(session, tenant_id),
            limits.get("max_storage_bytes"),
        ),
    ]
    return Overview(
        tenant=tenant,
        quota=quota,
        meters=meters,
        tokens_by_hour=bar_chart(_series(report, start, timedelta(hours=1), HOURS, "%H:00")),
        requests_24h=report.totals.requests,
        tokens_24h=report.totals.total_tokens,
        errors_24h=report.totals.errors,
        by_model=_by_model(report),
        eval_tokens_today=await _eval_tokens(session, tenant_id, day_start),
    )


async def _eval_tokens(session: AsyncSession, tenant_id: UUID, day_start: datetime) -> int:
    """Tokens of the tenant's eval runs since `day_start` (UTC): usage rows have no kind,
    spend rows do."""
    tokens = await session.scalar(
        select(func.sum(Spend.prompt_tokens + Spend.completion_tokens)).where(
            Spend.tenant_id == tenant_id, Spend.day >= day_start, Spend.kind == EVAL_USAGE
        )
    )
    return int(tokens or 0)


def _by_model(report: UsageReportOut) -> list[ModelUsage]:
    """The report's usage summed per model id, most tokens first."""
    sums: dict[str, list[int]] = {}
    for bucket in report.buckets:
        row = sums.setdefault(bucket.model, [0, 0, 0])
        row[0] += bucket.requests
        row[1] += bucket.total_tokens
        row[2] += bucket.errors
    total = max(report.totals.total_tokens, 1)
    rows = [
        ModelUsage(model, requests, tokens, errors, 100 * tokens / total)
        for model, (requests, tokens, errors) in sums.items()
    ]
    return sorted(rows, key=lambda r: (-r.tokens, r.model))


def _series(
    report: UsageReportOut, start: datetime, step: timedelta, count: int, label: str
) -> list[tuple[str, int]]:
    """Tokens per bucket for every bucket of the window, zero where nothing ran."""
    tokens: dict[datetime, int] = {}
    for bucket in report.buckets:
        moment = bucket.time if bucket.time.tzinfo else bucket.time.replace(tzinfo=UTC)
        tokens[moment] = tokens.get(moment, 0) + bucket.total_tokens
    moments = [start + i * step for i in range(count)]
    return [(f"{m:{label}}", tokens.get(m, 0)) for m in moments]


CSV_COLUMNS = (
    "day",
    "model",
    "adapter_version_id",
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "errors",
    "cut_streams",
)


async def usage_csv(
    session: AsyncSession, tenant_id: UUID, days: int, now: datetime | None = None
) -> bytes:
    """The tenant's usage per UTC day and model id over the last `days` days (today
    included), as CSV with a header row."""
    now = now or datetime.now(UTC)
    start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days - 1)
    report = await UsageService(session=session).report(
        start, now, GroupBy.DAY, tenant_id=tenant_id
    )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for b in report.buckets:
        writer.writerow(
            (
                f"{b.time:%Y-%m-%d}",
                b.model,
                b.adapter_version_id or "",
                b.requests,
                b.prompt_tokens,
                b.completion_tokens,
                b.total_tokens,
                b.errors,
                b.cut_streams,
            )
        )
    return out.getvalue().encode()


@dataclass(frozen=True)
class Traffic:
    """Every tenant's traffic over the last hour, per minute (from the usage table, so it
    covers all API replicas)."""

    tokens_by_minute: BarChart
    requests: int
    tokens: int
    errors: int


async def traffic(session: AsyncSession, now: datetime | None = None) -> Traffic:
    """Tokens per minute over the last hour, all tenants."""
    now = now or datetime.now(UTC)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=MINUTES - 1)
    report = await UsageService(session=session).report(start, now, GroupBy.MINUTE)
    points = _series(report, start, timedelta(minutes=1), MINUTES, "%H:%M")
    return Traffic(
        bar_chart(points), report.totals.requests, report.totals.total_tokens, report.totals.errors
    )


async def keys(session: AsyncSession, tenant_id: UUID) -> list[KeyOut]:
    """The tenant's API keys, newest first (never their secrets)."""
    service = ApiKeyService(session=session)
    rows = await service.get_many(OrderBy("created_at", "desc"), ApiKey.tenant_id == tenant_id)
    return [service.to_out(key) for key in rows]


async def adapter_card(session: AsyncSession, adapter: Adapter) -> AdapterCard:
    """One adapter's versions and aliases."""
    versions = (
        await session.scalars(
            select(AdapterVersion)
            .where(AdapterVersion.adapter_id == adapter.id)
            .order_by(AdapterVersion.number.desc())
        )
    ).all()
    aliases = AliasService(session=session)
    rows = await aliases.get_many(AdapterAlias.adapter_id == adapter.id, OrderBy("name", "asc"))
    return AdapterCard(
        adapter,
        [VersionService.to_out(adapter, v) for v in versions],
        [await aliases.to_out(a) for a in rows],
    )


async def recent_audit(session: AsyncSession, limit: int = 25) -> list[AuditEntry]:
    """The newest audit entries (operators)."""
    rows = await session.scalars(
        select(AuditEntry).order_by(AuditEntry.created_at.desc()).limit(limit)
    )
    return list(rows.all())


@dataclass(frozen=True)
class AdapterRow:
    """One adapter of any tenant, for the operators' list."""

    tenant: str  # slug
    adapter: Adapter
    versions: int
    ready: int
    stored_bytes: int


async def all_adapters(session: AsyncSession, limit: int = 500) -> list[AdapterRow]:
    """Every tenant's adapters with version counts and bytes stored, by tenant and name."""
    ready = func.count().filter(AdapterVersion.status == VersionStatus.READY)
    rows = await session.execute(
        select(
            Tenant.slug,
            Adapter,
            func.count(AdapterVersion.id),
            ready,
            func.coalesce(func.sum(AdapterVersion.size_bytes), 0),
        )
        .join(Tenant, Tenant.id == Adapter.tenant_id)
        .outerjoin(AdapterVersion, AdapterVersion.adapter_id == Adapter.id)
        .group_by(Tenant.slug, Adapter.id)
        .order_by(Tenant.slug, Adapter.name)
        .limit(limit)
    )
    return [AdapterRow(slug, a, int(n), int(r), int(b)) for slug, a, n, r, b in rows.unique()]


async def all_jobs(session: AsyncSession, limit: int = 200) -> list[tuple[str, FineTuneJob]]:
    """The newest fine-tuning jobs of every tenant, with the tenant's slug."""
    rows = await session.execute(
        select(Tenant.slug, FineTuneJob)
        .join(Tenant, Tenant.id == FineTuneJob.tenant_id)
        .order_by(FineTuneJob.created_at.desc())
        .limit(limit)
    )
    return [(slug, job) for slug, job in rows]


GET_STARTED_MODELS = 3  # model names the overview's "Get started" card lists


@dataclass(frozen=True)
class GetStarted:
    """What the overview's "Get started" card needs to show a tenant how to call its own
    adapters from code: never a key's secret, only the prefix of one it may infer with."""

    key_prefix: str | None  # the newest usable inference key's stored prefix
    models: list[str]  # up to GET_STARTED_MODELS model ids, as `/v1/models` names them
    adapters: int  # how many adapters the tenant has (servable or not)

    @property
    def key_hint(self) -> str | None:
        """The key as it begins (`lpx_<prefix>_…`), enough to tell it apart, not to use it."""
        return f"{BRAND}_{self.key_prefix}_…" if self.key_prefix else None

    @property
    def model(self) -> str | None:
        """The model the snippets call."""
        return self.models[0] if self.models else None


# A first fine-tune that visibly changes the generated development model in about a minute
# on a CPU worker (measured on 8 chat rows): OpenAI's "auto" (3 epochs at the base rate) is
# tuned for real models and barely moves it.
STARTER_HYPERPARAMETERS = {"n_epochs": 60, "learning_rate_multiplier": 15}


@dataclass(frozen=True)
class StarterTune:
    """A one-click fine-tune offered on the overview: the tenant's newest training file."""

    training_file: str  # its public id
    filename: str
    base_model: str
    hyperparameters: dict[str, int]


async def starter_tune(session: AsyncSession, tenant_id: UUID) -> StarterTune | None:
    """The newest training file and the first base model, or None without either."""
    row = (
        await session.execute(
            select(DatasetFile.id, DatasetFile.filename)
            .where(DatasetFile.tenant_id == tenant_id, DatasetFile.method == "supervised")
            .order_by(DatasetFile.created_at.desc())
            .limit(1)
        )
    ).first()
    models = await base_model_names(session)
    if row is None or not models:
        return None
    return StarterTune(public(FILE, row.id), row.filename, models[0], STARTER_HYPERPARAMETERS)


async def get_started(
    session: AsyncSession, tenant_id: UUID, now: datetime | None = None
) -> GetStarted:
    """The tenant's newest live inference key (prefix only) and up to three model ids a
    client can send now: `<adapter>@<alias>` per alias (`prod` first), or `<adapter>` for
    an adapter with a ready version and no alias (the gateway serves its newest ready one)."""
    now = now or datetime.now(UTC)
    keys = await session.scalars(
        select(ApiKey)
        .where(ApiKey.tenant_id == tenant_id, ApiKey.revoked_at.is_(None))
        .order_by(ApiKey.created_at.desc())
    )
    prefix = next(
        (
            k.prefix
            for k in keys
            if Scope.INFERENCE in (k.scopes or []) and (k.expires_at is None or k.expires_at > now)
        ),
        None,
    )
    adapters = (
        await session.execute(
            select(Adapter.id, Adapter.name)
            .where(Adapter.tenant_id == tenant_id)
            .order_by(Adapter.name)
        )
    ).all()
    aliases: dict[UUID, list[str]] = {}
    for adapter_id, alias in await session.execute(
        select(AdapterAlias.adapter_id, AdapterAlias.name)
        .join(Adapter, Adapter.id == AdapterAlias.adapter_id)
        .where(Adapter.tenant_id == tenant_id)
        .order_by(AdapterAlias.name != "prod", AdapterAlias.name)
    ):
        aliases.setdefault(adapter_id, []).append(alias)
    ready = set(
        (
            await session.scalars(
                select(AdapterVersion.adapter_id)
                .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
                .where(Adapter.tenant_id == tenant_id, AdapterVersion.status == VersionStatus.READY)
                .distinct()
            )
        ).all()
    )
    models: list[str] = []
    for adapter_id, name in adapters:
        if adapter_id in aliases:
            models.extend(f"{name}@{alias}" for alias in aliases[adapter_id])
        elif adapter_id in ready:
            models.append(name)
    return GetStarted(prefix, models[:GET_STARTED_MODELS], len(adapters))
