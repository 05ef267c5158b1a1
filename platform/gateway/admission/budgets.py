"""`BudgetGuard`: money budgets at admission, beside the token quotas.

For each request it finds the price of the base model (less the plan's discount) and the
budgets the request spends from (its tenant's, its key's, its adapter's), and reserves the
price of the most the request may use (prompt + `max_tokens` x choices; a fine-tune's
file tokens x epochs) from all of them in one Redis script (`TenantQuotas.reserve_spend`).
A request that would pass any of them is refused with 429 `budget_exceeded`. The hold is
settled at the real cost when the request ends, where its tokens are settled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import msgspec

from loraplex.control.budgets.alerts import BudgetAlerts
from loraplex.control.budgets.book import BudgetBook
from loraplex.control.budgets.money import FULL_PERCENT_BP, BudgetLine
from loraplex.gateway.admission.service import REDIS_ERRORS, TenantQuotas
from loraplex.gateway.admission.ticket import SpendHold
from loraplex.serving.engines import GenerateRequest

DISCOUNT = "price_discount_percent"  # the plan's quota field holding its discount


def prompt_bound(counted: int | None, request: GenerateRequest) -> int:
    """The prompt tokens to reserve: the gateway's count when it has the tokenizer; else
    the bytes of the request's messages (or prompt) and tools as JSON, a bound on what a
    byte-level tokenizer makes of them (no token is shorter than a byte), template included."""
    if counted is not None:
        return counted
    shown = msgspec.json.encode([request.messages, request.prompt, _tools(request)])
    return len(shown)


def _tools(request: GenerateRequest) -> Any:
    return request.options.tools if request.options is not None else None


def discount_bp(limits: Mapping[str, int]) -> int:
    """The plan's discount in basis points (a whole percentage on the plan)."""
    return min(int(limits.get(DISCOUNT, 0)), 100) * FULL_PERCENT_BP // 100


class BudgetGuard:
    """Reserves a request's price from its budgets, and settles it at the real cost."""

    def __init__(
        self,
        quotas: TenantQuotas,
        book: BudgetBook,
        alerts: BudgetAlerts | None = None,
        currency: str = "USD",
    ):
        self.quotas, self.book, self.alerts, self.currency = quotas, book, alerts, currency

    async def reserve(
        self,
        tenant_id: UUID,
        limits: Mapping[str, int],
        base_model: str,
        *,
        key_id: UUID | None = None,
        adapter_id: UUID | None = None,
        prompt: int = 0,
        completion: int = 0,
        training: int = 0,
    ) -> SpendHold | None:
        """The request's hold, or `BudgetExceeded` raised; None when Redis is down and
        admission fails open."""
        price = (await self.book.price(base_model)).discounted(discount_bp(limits))
        lines = (await self.book.budgets(tenant_id)).applying(key_id, adapter_id)
        hold = await self.quotas.reserve_spend(
            tenant_id, lines, price, prompt=prompt, completion=completion,
            training=training, currency=self.currency,
        )  # fmt: skip
        if hold is not None and hold.crossed and self.alerts is not None:
            self.alerts.note(tenant_id, hold.crossed)
        return hold

    async def spent(self, tenant_id: UUID, lines: Sequence[BudgetLine]) -> list[int]:
        """Micro-units spent or reserved against each budget this period (0s without Redis)."""
        try:
            return await self.quotas.spent(tenant_id, lines)
        except REDIS_ERRORS:
            return [0] * len(lines)

    async def settle(self, hold: SpendHold | None) -> None:
        """Settle `hold` at its recorded cost (its whole reservation if none was recorded)."""
        if hold is not None:
            await self.quotas.settle_spend(hold)
