"""The gateway reserves a request's price before the engines' admission and gives it all
back when that admission refuses the request (on the embedded Redis stand-in)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from loraplex.control.budgets.book import TenantBudgets
from loraplex.control.budgets.money import BudgetLine, Period, Price, Scope
from loraplex.control.quotas import Quotas
from loraplex.gateway.admission import Overloaded, TenantQuotas
from loraplex.gateway.admission.budgets import BudgetGuard, prompt_bound
from loraplex.gateway.admission.errors import BudgetExceeded
from loraplex.gateway.pump import StreamLimits
from loraplex.gateway.resolve import Target
from loraplex.gateway.schemas import ChatCompletionRequest
from loraplex.gateway.service import Gateway
from loraplex.redis_client import embedded_redis
from loraplex.serving.engines import GenerateRequest

TARGET = Target(model="bot", base_model="tiny", max_context=4096, base_source="/nowhere")
BUDGET = BudgetLine("b", Scope.TENANT, "", Period.DAY, 1_000, 8000)
CHAT = ChatCompletionRequest(
    model="bot", messages=[{"role": "user", "content": "hi"}], max_tokens=100
)


class OneTarget:
    async def resolve(self, tenant_id: Any, model: str) -> Any:
        return SimpleNamespace(pick=lambda user: TARGET)


class Book:
    """One budget of 1,000 micro-units; 1 micro-unit per completion token."""

    async def price(self, base_model: str) -> Price:
        return Price(completion=1_000_000)

    async def budgets(self, tenant_id: Any) -> TenantBudgets:
        return TenantBudgets((BUDGET,))


class RefusingGate:
    async def admit(self, *args: Any, **kwargs: Any) -> None:
        raise Overloaded("1")


def gateway(quotas: TenantQuotas, gate: Any) -> Gateway:
    guard = BudgetGuard(quotas, Book())  # type: ignore[arg-type]
    return Gateway(OneTarget(), None, None, StreamLimits(), gate=gate, budgets=guard)  # type: ignore[arg-type]


async def test_a_request_the_engines_refuse_gives_its_whole_reservation_back() -> None:
    quotas = TenantQuotas(embedded_redis())
    tenant = uuid.uuid4()
    with pytest.raises(Overloaded):
        await gateway(quotas, RefusingGate()).prepare(tenant, CHAT, Quotas())
    assert await quotas.spent(tenant, [BUDGET]) == [0]


async def test_a_request_over_its_budget_is_refused_before_the_engines_are_asked() -> None:
    quotas = TenantQuotas(embedded_redis())
    asked = []

    class Gate:
        async def admit(self, *args: Any, **kwargs: Any) -> None:
            asked.append(args)

    over = ChatCompletionRequest(
        model="bot", messages=[{"role": "user", "content": "hi"}], max_tokens=1_001
    )
    with pytest.raises(BudgetExceeded):
        await gateway(quotas, Gate()).prepare(uuid.uuid4(), over, Quotas())
    assert asked == []


def test_without_a_tokenizer_the_prompt_reserved_is_its_bytes_as_json() -> None:
    request = GenerateRequest(rid="r", messages=[{"role": "user", "content": "héllo"}])
    assert prompt_bound(7, request) == 7
    bound = prompt_bound(None, request)
    assert bound >= len("héllo".encode()) and bound == len(
        '[[{"role":"user","content":"héllo"}],null,null]'.encode()
    )
