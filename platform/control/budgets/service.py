"""Prices (operators), budgets (tenant admins) and spend reports, over the database and
the live spend counters in Redis.

Every change announces `Change.BUDGETS` on commit, so each replica's `BudgetBook` drops its
copies and the next admission sees the new price or budget.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.changes import Change, announce
from loraplex.control.audit.service import record
from loraplex.control.budgets.book import line_of
from loraplex.control.budgets.money import (
    MAX_PRICE_MICROS,
    Period,
    Scope,
    format_amount,
    format_percent,
    parse_amount,
    parse_percent,
    period_reset,
)
from loraplex.control.budgets.schemas import (
    BudgetCreate,
    BudgetList,
    BudgetOut,
    BudgetUpdate,
    PriceIn,
    PriceOut,
)
from loraplex.db.models import Adapter, ApiKey, BaseModel, Budget, ModelPrice
from loraplex.db.models.budgets import NOBODY
from loraplex.errors import Conflict, InvalidInput, NotFound
from loraplex.gateway.admission.budgets import BudgetGuard

MAX_BUDGETS_PER_TENANT = 200  # every admission of the tenant reads them all


class PriceService:
    """Operators set what each base model's tokens cost."""

    def __init__(self, session: AsyncSession, currency: str):
        self.session, self.currency = session, currency

    async def list(self) -> list[PriceOut]:
        """Every price set, by base model."""
        rows = await self.session.execute(select(ModelPrice).order_by(ModelPrice.base_model))
        return [self.to_out(row) for row in rows.scalars()]

    async def put(self, base_model: str, data: PriceIn, actor: str) -> PriceOut:
        """Set (or replace) the base model's price."""
        known = await self.session.execute(select(BaseModel.id).where(BaseModel.name == base_model))
        if known.scalar_one_or_none() is None:
            raise NotFound(f"No base model named {base_model!r}", param="base_model")
        micros = {
            name: parse_amount(getattr(data, name), param=name, most=MAX_PRICE_MICROS)
            for name in ("prompt", "completion", "training")
        }
        row = await self._get(base_model)
        if row is None:
            row = ModelPrice(base_model=base_model)
            self.session.add(row)
        row.prompt_micros = micros["prompt"]
        row.completion_micros = micros["completion"]
        row.training_micros = micros["training"]
        await self.session.flush()
        record(self.session, actor, "price.set", row, base_model=base_model,
               **{k: format_amount(v) for k, v in micros.items()})  # fmt: skip
        announce(self.session, Change.BUDGETS)
        return self.to_out(row)

    async def delete(self, base_model: str, actor: str) -> None:
        """Remove the base model's price: its tokens are free again."""
        row = await self._get(base_model)
        if row is None:
            raise NotFound(f"No price is set for {base_model!r}", param="base_model")
        record(self.session, actor, "price.delete", row, base_model=base_model)
        await self.session.delete(row)
        announce(self.session, Change.BUDGETS)

    def to_out(self, row: ModelPrice) -> PriceOut:
        """The price as the API shows it."""
        return PriceOut(
            base_model=row.base_model,
            prompt=format_amount(row.prompt_micros),
            completion=format_amount(row.completion_micros),
            training=format_amount(row.training_micros),
            currency=self.currency,
        )

    async def _get(self, base_model: str) -> ModelPrice | None:
        rows = await self.session.execute(
            select(ModelPrice).where(ModelPrice.base_model == base_model)
        )
        return rows.scalar_one_or_none()


class BudgetService:
    """Tenant admins set money budgets for the tenant, its keys and its adapters."""

    def __init__(self, session: AsyncSession, guard: BudgetGuard):
        self.session, self.guard = session, guard

    async def list(self, tenant_id: UUID) -> BudgetList:
        """The tenant's budgets with this period's spend."""
        rows = await self.session.execute(
            select(Budget).where(Budget.tenant_id == tenant_id).order_by(Budget.created_at)
        )
        return BudgetList(items=await self._out(list(rows.scalars())))

    async def get(self, tenant_id: UUID, budget_id: UUID) -> BudgetOut:
        """One budget with this period's spend."""
        return (await self._out([await self._budget(tenant_id, budget_id)]))[0]

    async def create(self, tenant_id: UUID, data: BudgetCreate, actor: str) -> BudgetOut:
        """Add a budget; one per scope, subject and period."""
        subject = await self._subject(tenant_id, Scope(data.scope), data.subject_id)
        count = await self.session.execute(select(Budget.id).where(Budget.tenant_id == tenant_id))
        if len(count.all()) >= MAX_BUDGETS_PER_TENANT:
            raise InvalidInput(f"a tenant has at most {MAX_BUDGETS_PER_TENANT} budgets")
        clash = await self.session.execute(
            select(Budget.id).where(
                Budget.tenant_id == tenant_id, Budget.scope == data.scope,
                Budget.subject_id == subject, Budget.period == data.period,
            )
        )  # fmt: skip
        if clash.first() is not None:
            raise Conflict(f"a {data.period} budget for this {data.scope} already exists")
        budget = Budget(
            tenant_id=tenant_id,
            scope=data.scope,
            subject_id=subject,
            period=data.period,
            amount_micros=parse_amount(data.amount, param="amount"),
            alert_bp=parse_percent(data.alert_percent, param="alert_percent"),
        )
        self.session.add(budget)
        await self.session.flush()
        self._audit(actor, "budget.create", budget)
        return await self.get(tenant_id, budget.id)

    async def update(
        self, tenant_id: UUID, budget_id: UUID, data: BudgetUpdate, actor: str
    ) -> BudgetOut:
        """Change a budget's allowance or alert share."""
        budget = await self._budget(tenant_id, budget_id)
        if data.amount is not None:
            budget.amount_micros = parse_amount(data.amount, param="amount")
        if data.alert_percent is not None:
            budget.alert_bp = parse_percent(data.alert_percent, param="alert_percent")
        await self.session.flush()
        self._audit(actor, "budget.update", budget)
        return await self.get(tenant_id, budget.id)

    async def delete(self, tenant_id: UUID, budget_id: UUID, actor: str) -> None:
        """Remove a budget."""
        budget = await self._budget(tenant_id, budget_id)
        self._audit(actor, "budget.delete", budget)
        await self.session.delete(budget)

    async def _budget(self, tenant_id: UUID, budget_id: UUID) -> Budget:
        budget = await self.session.get(Budget, budget_id)
        if budget is None or budget.tenant_id != tenant_id:
            raise NotFound("No such budget", param="budget_id")
        return budget

    async def _subject(self, tenant_id: UUID, scope: Scope, subject_id: UUID | None) -> UUID:
        """The stored subject: the tenant's budget has none; a key or adapter must be the
        tenant's own (another tenant's is a 404, as if it did not exist)."""
        if scope is Scope.TENANT:
            if subject_id is not None:
                raise InvalidInput("a tenant budget takes no subject_id", param="subject_id")
            return NOBODY
        if subject_id is None:
            raise InvalidInput(f"a {scope} budget needs the {scope}'s id", param="subject_id")
        model = ApiKey if scope is Scope.KEY else Adapter
        owner = await self.session.execute(select(model.tenant_id).where(model.id == subject_id))
        if owner.scalar_one_or_none() != tenant_id:
            raise NotFound(f"No such {scope}: {subject_id}", param="subject_id")
        return subject_id

    async def _subject_names(self, budgets: list[Budget]) -> dict[UUID, str]:
        """Each budget's subject by name: a key by its prefix, an adapter by its name."""
        ids = {b.subject_id for b in budgets}
        keys = await self.session.execute(
            select(ApiKey.id, ApiKey.prefix).where(ApiKey.id.in_(ids))
        )
        adapters = await self.session.execute(
            select(Adapter.id, Adapter.name).where(Adapter.id.in_(ids))
        )
        names = {NOBODY: "tenant"}
        names.update({key_id: f"key {prefix}" for key_id, prefix in keys.all()})
        names.update({adapter_id: f"adapter {name}" for adapter_id, name in adapters.all()})
        return names

    def _audit(self, actor: str, action: str, budget: Budget) -> None:
        record(self.session, actor, action, budget, tenant_id=budget.tenant_id,
               scope=budget.scope, period=budget.period,
               amount=format_amount(budget.amount_micros))  # fmt: skip
        announce(self.session, Change.BUDGETS)

    async def _out(self, budgets: list[Budget]) -> list[BudgetOut]:
        if not budgets:
            return []
        lines = [line_of(b) for b in budgets]
        spent = await self.guard.spent(budgets[0].tenant_id, lines)
        names = await self._subject_names(budgets)
        now = datetime.now(UTC)
        return [
            BudgetOut(
                id=b.id,
                tenant_id=b.tenant_id,
                scope=b.scope,
                subject_id=None if b.subject_id == NOBODY else b.subject_id,
                subject=names.get(b.subject_id, f"{b.scope} {b.subject_id}"),
                period=b.period,
                amount=format_amount(b.amount_micros),
                alert_percent=format_percent(b.alert_bp),
                currency=self.guard.currency,
                spent=format_amount(used),
                resets_at=period_reset(Period(b.period), now),
                alerting=used > line.alert_at(),
                exhausted=used >= b.amount_micros,
            )
            for b, line, used in zip(budgets, lines, spent, strict=True)
        ]
