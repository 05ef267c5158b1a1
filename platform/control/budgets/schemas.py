"""Request and response bodies for prices, budgets and spend. Amounts are decimal strings
("12.50") in the deployment's currency, never JSON numbers: a float cannot hold them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output

Amount = Annotated[str, msgspec.Meta(min_length=1, max_length=32, examples=["12.50"])]
ScopeName = Literal["tenant", "key", "adapter"]
PeriodName = Literal["day", "month"]


class PriceIn(Input):
    """What a base model's tokens cost, per million tokens of each kind."""

    prompt: Amount = "0"
    completion: Amount = "0"
    training: Amount = "0"


class PriceOut(Output):
    """A base model's price, per million tokens."""

    base_model: str
    prompt: str
    completion: str
    training: str
    currency: str
    per_tokens: int = 1_000_000


class BudgetCreate(Input):
    """A budget: `subject_id` is the key's or adapter's id (none for the tenant's own)."""

    scope: ScopeName
    period: PeriodName
    amount: Amount
    subject_id: UUID | None = None
    alert_percent: Amount = "80"


class BudgetUpdate(Input):
    """A new allowance or alert share for a budget."""

    amount: Amount | None = None
    alert_percent: Amount | None = None


class BudgetOut(Output):
    """A budget, with what is spent (and reserved by requests in flight) this period."""

    id: UUID
    tenant_id: UUID
    scope: str
    subject_id: UUID | None
    subject: str  # what it limits, by name: "tenant", "key lpx_ab12cd34", "adapter support-bot"
    period: str
    amount: str
    alert_percent: str
    currency: str
    spent: str
    resets_at: datetime
    alerting: bool  # spend passed the alert share
    exhausted: bool  # nothing is left: every request that costs anything is refused


class BudgetList(Output):
    """A tenant's budgets."""

    items: list[BudgetOut]


class SpendRowOut(Output):
    """Spend of one UTC day, model, key, adapter and kind."""

    day: datetime
    model: str
    base_model: str
    api_key_id: UUID | None
    adapter_id: UUID | None
    kind: str  # inference | eval | training
    requests: int
    prompt_tokens: int
    completion_tokens: int
    training_tokens: int
    amount: str


class SpendTotal(Output):
    """Spend summed over one value of one dimension (a model, a key, a day or a kind)."""

    name: str
    requests: int
    amount: str
    tokens: int  # prompt + completion + training


class SpendReportOut(Output):
    """A tenant's spend in [start, end), by day, model, key and adapter; newest day first."""

    start: datetime
    end: datetime
    currency: str
    total: str
    rows: list[SpendRowOut]
    by_model: list[SpendTotal]
    by_key: list[SpendTotal]
    by_day: list[SpendTotal]
    # "inference" (the tenant's own requests), "eval" (eval runs' requests), "training"
    by_kind: list[SpendTotal]
