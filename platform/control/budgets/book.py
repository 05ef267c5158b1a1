"""A short cache of prices and of each tenant's budgets, so admission does not query them
per request. A change on any replica drops the copies (the change feed's `TENANT_LIMITS`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.budgets.money import FREE, BudgetLine, Period, Price, Scope
from loraplex.db.models import Budget, ModelPrice
from loraplex.ttl_cache import TtlCache

PRICES = "prices"  # the one key of the price cache


@dataclass(frozen=True)
class TenantBudgets:
    """A tenant's budgets in force."""

    lines: tuple[BudgetLine, ...] = field(default=())

    def applying(self, key_id: UUID | None, adapter_id: UUID | None) -> tuple[BudgetLine, ...]:
        """The budgets a request by `key_id` on `adapter_id` spends from."""
        key = str(key_id) if key_id is not None else None
        adapter = str(adapter_id) if adapter_id is not None else None
        return tuple(line for line in self.lines if line.applies(key, adapter))


def line_of(budget: Budget) -> BudgetLine:
    """A stored budget as the policy sees it."""
    return BudgetLine(
        id=str(budget.id),
        scope=Scope(budget.scope),
        subject=str(budget.subject_id),
        period=Period(budget.period),
        amount=budget.amount_micros,
        alert_bp=budget.alert_bp,
    )


def price_of(row: ModelPrice) -> Price:
    """A stored price as the policy sees it."""
    return Price(row.prompt_micros, row.completion_micros, row.training_micros)


class BudgetBook:
    """Prices and tenants' budgets, refreshed after `ttl_s` (stale-while-revalidate)."""

    def __init__(
        self,
        session_factory: Callable[[], AsyncSession],
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._session_factory = session_factory
        self._budgets: TtlCache[UUID, TenantBudgets] = TtlCache(ttl_s, clock, stale_s=60.0)
        self._prices: TtlCache[str, dict[str, Price]] = TtlCache(ttl_s, clock, stale_s=60.0)

    async def budgets(self, tenant_id: UUID) -> TenantBudgets:
        """The tenant's budgets."""
        return await self._budgets.get(tenant_id, lambda: self._load_budgets(tenant_id))

    async def price(self, base_model: str) -> Price:
        """The base model's price; free when no operator set one."""
        prices = await self._prices.get(PRICES, self._load_prices)
        return prices.get(base_model, FREE)

    def forget_all(self) -> None:
        """Drop every cached copy (a price or budget changed somewhere)."""
        self._budgets.clear()
        self._prices.clear()

    async def _load_budgets(self, tenant_id: UUID) -> TenantBudgets:
        async with self._session_factory() as session:
            rows = await session.execute(select(Budget).where(Budget.tenant_id == tenant_id))
            return TenantBudgets(tuple(line_of(b) for b in rows.scalars()))

    async def _load_prices(self) -> dict[str, Price]:
        async with self._session_factory() as session:
            rows = await session.execute(select(ModelPrice))
            return {row.base_model: price_of(row) for row in rows.scalars()}
