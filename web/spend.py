"""The console's Spend page (spend by model, key and day; the tenant's budgets; CSV) and
the budget banner every console page loads."""

from __future__ import annotations

from uuid import UUID

from litestar import Controller, Response, get
from litestar.di import Provide
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.budgets.report import report_csv, spend_report
from loraplex.control.budgets.service import BudgetService
from loraplex.gateway.admission.budgets import BudgetGuard
from loraplex.settings import Settings
from loraplex.web.console import provide_tenant_id


class SpendPages(Controller):
    """`/console/spend` and the banner of budgets past their alert share."""

    path = "/console"
    dependencies = {"tenant_id": Provide(provide_tenant_id, sync_to_thread=False)}

    @get("/spend", name="console.spend")
    async def spend_page(
        self, tenant_id: UUID, db_session: AsyncSession, settings: Settings, budgets: BudgetGuard
    ) -> Template:
        """The last 30 days' spend by model, key and day, and this period's budgets."""
        context = {
            "report": await spend_report(db_session, tenant_id, settings.currency),
            "budgets": (await BudgetService(db_session, budgets).list(tenant_id)).items,
        }
        return Template("console/spend.html", context=context)

    @get("/spend.csv", name="console.spend_csv")
    async def spend_csv(
        self, tenant_id: UUID, db_session: AsyncSession, settings: Settings
    ) -> Response[str]:
        """The last 30 days' spend rows as CSV (`GET /api/v1/tenants/{id}/spend.csv`)."""
        report = await spend_report(db_session, tenant_id, settings.currency)
        return Response(
            report_csv(report),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": 'attachment; filename="loraplex-spend.csv"'},
        )

    @get("/budget-banner", name="console.budget_banner")
    async def budget_banner(
        self, tenant_id: UUID, db_session: AsyncSession, budgets: BudgetGuard
    ) -> Template:
        """The budgets past their alert share, as a banner (empty when none is)."""
        listed = (await BudgetService(db_session, budgets).list(tenant_id)).items
        alerting = [b for b in listed if b.alerting or b.exhausted]
        return Template("console/_budget_banner.html", context={"alerting": alerting})
