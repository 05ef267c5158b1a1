"""HTTP routes: prices (operators write, every key reads), a tenant's budgets (its admins),
and its spend report as JSON or CSV."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from litestar import Controller, Response, delete, get, patch, post, put
from litestar.di import Provide
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.budgets.report import report_csv, spend_report
from loraplex.control.budgets.schemas import (
    BudgetCreate,
    BudgetList,
    BudgetOut,
    BudgetUpdate,
    PriceIn,
    PriceOut,
    SpendReportOut,
)
from loraplex.control.budgets.service import BudgetService, PriceService
from loraplex.gateway.admission.budgets import BudgetGuard
from loraplex.settings import Settings

PRICES = "/api/v1/prices"
BUDGETS = "/api/v1/tenants/{tenant_id:uuid}/budgets"
SPEND = "/api/v1/tenants/{tenant_id:uuid}/spend"


def provide_prices(db_session: AsyncSession, settings: Settings) -> PriceService:
    """The `prices` dependency."""
    return PriceService(db_session, settings.currency)


def provide_budget_service(db_session: AsyncSession, budgets: BudgetGuard) -> BudgetService:
    """The `budget_service` dependency."""
    return BudgetService(db_session, budgets)


class PriceController(Controller):
    """What each base model's prompt, completion and training tokens cost."""

    tags = ["budgets"]
    dependencies = {"prices": Provide(provide_prices, sync_to_thread=False)}

    @get(PRICES, operation_id="ListPrices", opt=access.tenant("read"))
    async def list_prices(self, prices: PriceService) -> list[PriceOut]:
        """Every price set; a base model without one is free."""
        return await prices.list()

    @put(f"{PRICES}/{{base_model:str}}", operation_id="SetPrice", opt=access.OPERATOR)
    async def set_price(
        self, base_model: str, data: PriceIn, prices: PriceService, principal: Principal
    ) -> PriceOut:
        """Set a base model's price per million tokens (plans' discounts come off it)."""
        return await prices.put(base_model, data, principal.actor)

    @delete(
        f"{PRICES}/{{base_model:str}}",
        operation_id="DeletePrice",
        opt=access.OPERATOR,
        status_code=204,
    )
    async def delete_price(
        self, base_model: str, prices: PriceService, principal: Principal
    ) -> None:
        """Remove a base model's price."""
        await prices.delete(base_model, principal.actor)


class BudgetController(Controller):
    """A tenant's money budgets, per day or month, for itself, a key or an adapter."""

    tags = ["budgets"]
    dependencies = {"budget_service": Provide(provide_budget_service, sync_to_thread=False)}

    @get(BUDGETS, operation_id="ListBudgets", opt=access.tenant())
    async def list_budgets(self, tenant_id: UUID, budget_service: BudgetService) -> BudgetList:
        """The tenant's budgets, with this period's spend and when each resets."""
        return await budget_service.list(tenant_id)

    @post(BUDGETS, operation_id="CreateBudget", opt=access.tenant())
    async def create_budget(
        self, tenant_id: UUID, data: BudgetCreate, budget_service: BudgetService,
        principal: Principal,
    ) -> BudgetOut:  # fmt: skip
        """Add a budget; requests that would pass it are refused with 429 `budget_exceeded`."""
        return await budget_service.create(tenant_id, data, principal.actor)

    @get(f"{BUDGETS}/{{budget_id:uuid}}", operation_id="GetBudget", opt=access.tenant())
    async def get_budget(
        self, tenant_id: UUID, budget_id: UUID, budget_service: BudgetService
    ) -> BudgetOut:
        """One budget."""
        return await budget_service.get(tenant_id, budget_id)

    @patch(f"{BUDGETS}/{{budget_id:uuid}}", operation_id="UpdateBudget", opt=access.tenant())
    async def update_budget(
        self, tenant_id: UUID, budget_id: UUID, data: BudgetUpdate,
        budget_service: BudgetService, principal: Principal,
    ) -> BudgetOut:  # fmt: skip
        """Change a budget's amount or alert share."""
        return await budget_service.update(tenant_id, budget_id, data, principal.actor)

    @delete(
        f"{BUDGETS}/{{budget_id:uuid}}",
        operation_id="DeleteBudget",
        opt=access.tenant(),
        status_code=204,
    )
    async def delete_budget(
        self, tenant_id: UUID, budget_id: UUID, budget_service: BudgetService,
        principal: Principal,
    ) -> None:  # fmt: skip
        """Remove a budget."""
        await budget_service.delete(tenant_id, budget_id, principal.actor)

    @get(SPEND, operation_id="GetSpend", opt=access.tenant(after_deletion=True))
    async def get_spend(
        self, tenant_id: UUID, db_session: AsyncSession, settings: Settings,
        start: datetime | None = None, end: datetime | None = None,
    ) -> SpendReportOut:  # fmt: skip
        """Spend by day, model, key and adapter (default: the last 30 days)."""
        return await spend_report(db_session, tenant_id, settings.currency, start, end)

    @get(f"{SPEND}.csv", operation_id="ExportSpend", opt=access.tenant(after_deletion=True))
    async def export_spend(
        self, tenant_id: UUID, db_session: AsyncSession, settings: Settings,
        start: datetime | None = None, end: datetime | None = None,
    ) -> Response[str]:  # fmt: skip
        """The spend report as CSV."""
        report = await spend_report(db_session, tenant_id, settings.currency, start, end)
        return Response(
            report_csv(report),
            media_type="text/csv",
            headers={"Content-Disposition": 'attachment; filename="spend.csv"'},
        )
