"""The console's Spend page and the budget banner, over HTTP as a browser speaks it."""

from __future__ import annotations

import csv
import io
from uuid import UUID

from loraplex.control.budgets.book import line_of
from loraplex.control.budgets.money import Price
from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import Budget
from loraplex.gateway.admission import TenantQuotas
from loraplex.gateway.usage import SpendKey, SqlUsageWriter, UsageRecorder
from tests.conftest import REDIS_URL
from tests.integration.web.conftest import PASSWORD, sign_in


async def _spent(settings, tenant, key_id: UUID, *costs: tuple[str, int]) -> None:
    """Record (model, micro-units) as the gateway records a request's spend."""
    config = sqlalchemy_config(settings)
    recorder = UsageRecorder(SqlUsageWriter(config.create_session_maker()))
    for model, amount in costs:
        recorder.record(UUID(tenant.id), None, model, 10, 10,
                        spend=SpendKey(key_id, None, model, amount))  # fmt: skip
    await recorder.flush()
    await config.get_engine().dispose()


async def _charge_budget(settings, budget_id: str, tenant_id: str, amount: int) -> None:
    """Reserve `amount` micro-units from the budget, as admission does."""
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        line = line_of(await session.get(Budget, UUID(budget_id)))
    await config.get_engine().dispose()
    quotas = TenantQuotas(REDIS_URL)
    await quotas.reserve_spend(tenant_id, [line], Price(training=1_000_000), training=amount)
    await quotas.aclose()


async def test_the_spend_page_shows_spend_by_model_key_and_day_and_exports_csv(
    browser_client, make_tenant, make_user, settings
) -> None:
    tenant = await make_tenant()
    keys = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/api-keys")).json()["items"]
    await _spent(
        settings, tenant, UUID(keys[0]["id"]), ("model-a", 2_500_000), ("model-b", 500_000)
    )
    user = await make_user(tenant, role="tenant_member")
    await sign_in(browser_client, user.email, PASSWORD)

    page = (await browser_client.get("/console/spend")).text

    assert "3.00 USD in the last 30 days" in page
    assert "<td>model-a</td><td>1</td><td>2.50</td>" in page
    assert f"<td>{keys[0]['prefix']}</td><td>2</td><td>3.00</td>" in page
    assert "<td>inference</td><td>2</td><td>40</td><td>3.00</td>" in page  # by kind, tokens
    exported = await browser_client.get("/console/spend.csv")
    assert sorted(r["amount"] for r in csv.DictReader(io.StringIO(exported.text))) == [
        "0.50",
        "2.50",
    ]


async def test_a_budget_past_its_alert_share_shows_a_banner(
    browser_client, make_tenant, make_user, settings
) -> None:
    tenant = await make_tenant()
    body = {"scope": "tenant", "period": "month", "amount": "10", "alert_percent": "50"}
    budget = (await tenant.api.post(f"/api/v1/tenants/{tenant.id}/budgets", json=body)).json()
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    assert "Budget" not in (await browser_client.get("/console/budget-banner")).text

    await _charge_budget(settings, budget["id"], tenant.id, 6_000_000)  # 6.00 of 10.00

    banner = (await browser_client.get("/console/budget-banner")).text
    assert "Budget alert" in banner and "6.00 of 10.00 USD" in banner
    assert "monthly budget of the tenant" in banner
    assert 'hx-get="/console/budget-banner"' in (await browser_client.get("/console/keys")).text
