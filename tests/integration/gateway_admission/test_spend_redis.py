"""Money budgets in Redis: all-or-nothing reservations, settlement, the alert and periods,
on the real Redis and on the embedded stand-in."""

from __future__ import annotations

import asyncio

import pytest

from loraplex.control.budgets.money import BudgetLine, Period, Price, Scope
from loraplex.gateway.admission import TenantQuotas
from loraplex.gateway.admission.errors import BudgetExceeded
from tests.integration.gateway_admission.conftest import FakeClock

PRICE = Price(prompt=1_000_000, completion=1_000_000)  # 1 micro-unit per token
TENANT = "tenant-a"


def line(name: str, amount: int, period: Period = Period.DAY, alert_bp: int = 8000) -> BudgetLine:
    return BudgetLine(name, Scope.TENANT, "", period, amount, alert_bp)


async def test_concurrent_reservations_never_pass_the_budget(admission: TenantQuotas) -> None:
    budget = line("b1", 1000)
    holds = await asyncio.gather(
        *(admission.reserve_spend(TENANT, [budget], PRICE, prompt=30, completion=40)
          for _ in range(40)),
        return_exceptions=True,
    )  # fmt: skip
    admitted = [h for h in holds if not isinstance(h, BaseException)]
    assert len(admitted) == 1000 // 70
    assert all(isinstance(h, BudgetExceeded) for h in holds if h not in admitted)
    assert await admission.spent(TENANT, [budget]) == [70 * len(admitted)]


async def test_a_refusal_by_one_budget_charges_none_of_the_others(admission: TenantQuotas) -> None:
    roomy, tight = line("roomy", 10_000), line("tight", 50)
    with pytest.raises(BudgetExceeded) as refused:
        await admission.reserve_spend(TENANT, [roomy, tight], PRICE, prompt=60)
    assert "tight" in refused.value.detail and "resets at" in refused.value.detail
    assert int(refused.value.headers["Retry-After"]) > 0
    assert await admission.spent(TENANT, [roomy, tight]) == [0, 0]


async def test_settling_gives_back_what_the_request_did_not_use(admission: TenantQuotas) -> None:
    budget = line("b2", 1000)
    hold = await admission.reserve_spend(TENANT, [budget], PRICE, prompt=10, completion=500)
    assert hold is not None
    hold.use(prompt=10, completion=25)
    await admission.settle_spend(hold)
    await admission.settle_spend(hold)  # once only
    assert await admission.spent(TENANT, [budget]) == [35]


async def test_the_alert_fires_once_when_spend_first_passes_its_share(
    admission: TenantQuotas,
) -> None:
    budget = line("b3", 100, alert_bp=5000)
    crossed = []
    for _ in range(8):
        hold = await admission.reserve_spend(TENANT, [budget], PRICE, prompt=10)
        assert hold is not None
        crossed.append(bool(hold.crossed))
    assert crossed == [False] * 5 + [True] + [False] * 2


async def test_a_new_day_starts_a_daily_budget_afresh(
    admission: TenantQuotas, clock: FakeClock
) -> None:
    daily, monthly = line("d", 100), line("m", 1000, Period.MONTH)
    await admission.reserve_spend(TENANT, [daily, monthly], PRICE, prompt=100)
    with pytest.raises(BudgetExceeded):
        await admission.reserve_spend(TENANT, [daily, monthly], PRICE, prompt=1)
    clock.advance(86_400)
    assert await admission.reserve_spend(TENANT, [daily, monthly], PRICE, prompt=100)
    assert await admission.spent(TENANT, [daily, monthly]) == [100, 200]


async def test_a_request_that_costs_nothing_passes_a_spent_budget(admission: TenantQuotas) -> None:
    budget = line("free", 10)
    await admission.reserve_spend(TENANT, [budget], PRICE, prompt=10)
    assert await admission.reserve_spend(TENANT, [budget], Price(), prompt=1000)
    with pytest.raises(BudgetExceeded):
        await admission.reserve_spend(TENANT, [budget], PRICE, prompt=1)
