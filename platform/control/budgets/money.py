"""The pure money policy: amounts, prices, costs and budget periods, with no I/O.

Amounts are integers of micro-units (a millionth of the deployment's currency), never
floats: 1 USD is 1_000_000. A price is micro-units per million tokens, so a price of
0.15 USD per 1M tokens is 150_000 and one token costs 0.15 micro-units. A cost is rounded
up to a whole micro-unit once, over the whole request, so a reservation (at `max_tokens`)
is never less than the settled cost of the same request, and a tenant is never billed a
fraction less than it used.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, Decimal, InvalidOperation

from loraplex.errors import InvalidInput

MICROS = 1_000_000  # micro-units per unit of currency
PER_TOKENS = 1_000_000  # prices are per this many tokens
# 10**12 units (a trillion dollars) keeps every sum of micro-units far inside a signed
# 64-bit integer (Redis INCRBY, PostgreSQL BIGINT): 10**18 < 9.2 * 10**18.
MAX_AMOUNT_MICROS = 10**12 * MICROS
MAX_PRICE_MICROS = 10**6 * MICROS  # a million units per million tokens
MAX_AMOUNT_CHARS = 32  # an amount's text, bounded before Decimal parses it
FULL_PERCENT_BP = 10_000  # basis points in 100 %


class Period(enum.StrEnum):
    """How long a budget's allowance lasts before it starts again (UTC)."""

    DAY = "day"
    MONTH = "month"


class Scope(enum.StrEnum):
    """What a budget limits: the whole tenant, one API key, or one adapter."""

    TENANT = "tenant"
    KEY = "key"
    ADAPTER = "adapter"


def parse_amount(text: str, *, param: str, most: int = MAX_AMOUNT_MICROS) -> int:
    """An amount in currency units ("12.50") as micro-units; at most six decimals."""
    if not isinstance(text, str) or len(text) > MAX_AMOUNT_CHARS:
        raise InvalidInput(f'{param} must be a decimal string such as "12.50"', param=param)
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise InvalidInput(
            f'{param} must be a decimal string such as "12.50"', param=param
        ) from None
    if not value.is_finite() or value < 0:
        raise InvalidInput(f"{param} must be a non-negative amount", param=param)
    if value > Decimal(most) / MICROS:  # before scaling: "1e999999999" would overflow
        raise InvalidInput(f"{param} is larger than {format_amount(most)}", param=param)
    if _decimals(value) > 6:
        raise InvalidInput(f"{param} has more than six decimal places", param=param)
    return int(value * MICROS)


def _decimals(value: Decimal) -> int:
    """Decimal places `value` needs (trailing zeros do not count). Read from its digits, not
    by arithmetic, which would round "1e-999999999" to 0 without a word."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite: checked by the caller
    significant = len("".join(map(str, digits)).rstrip("0"))
    if significant == 0:
        return 0
    return max(0, -(exponent + len(digits) - significant))


def format_amount(micros: int) -> str:
    """Micro-units as a decimal string with at least two decimals ("12.50", "0.000150")."""
    value = (Decimal(micros) / MICROS).quantize(Decimal("0.000001"), rounding=ROUND_DOWN)
    text = f"{value:f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def parse_percent(text: str, *, param: str) -> int:
    """A percentage ("12.5") as basis points, 0 to 100 %, at most two decimals."""
    micros = parse_amount(text, param=param, most=100 * MICROS)
    if micros % 10_000:
        raise InvalidInput(f"{param} has more than two decimal places", param=param)
    return micros // 10_000


def format_percent(bp: int) -> str:
    """Basis points as a percentage string ("12.5")."""
    return f"{(Decimal(bp) / 100).normalize():f}"


@dataclass(frozen=True, slots=True)
class Price:
    """Micro-units per million tokens of each kind for one base model, less a plan's
    discount in basis points (kept apart so the cost is rounded once: see `cost`)."""

    prompt: int = 0
    completion: int = 0
    training: int = 0
    discount_bp: int = 0

    def discounted(self, discount_bp: int) -> Price:
        """This price with a plan's discount taken off."""
        return replace(self, discount_bp=min(max(discount_bp, 0), FULL_PERCENT_BP))


FREE = Price()


def cost(price: Price, *, prompt: int = 0, completion: int = 0, training: int = 0) -> int:
    """What the tokens cost at `price`, in micro-units, rounded up once.

    Monotone in every count, so the cost of a reservation's counts bounds the cost of any
    smaller counts of the same request.
    """
    if min(prompt, completion, training) < 0:
        raise ValueError("token counts are never negative")
    raw = prompt * price.prompt + completion * price.completion + training * price.training
    numerator = raw * (FULL_PERCENT_BP - price.discount_bp)
    denominator = PER_TOKENS * FULL_PERCENT_BP
    return -(-numerator // denominator)


def period_start(period: Period, now: datetime) -> datetime:
    """The UTC start of the period holding `now`."""
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return day if period is Period.DAY else day.replace(day=1)


def period_reset(period: Period, now: datetime) -> datetime:
    """When the period holding `now` ends and the budget starts again (UTC)."""
    start = period_start(period, now)
    if period is Period.DAY:
        return start + timedelta(days=1)
    return (start + timedelta(days=32)).replace(day=1)


def period_label(period: Period, now: datetime) -> str:
    """The period's name in counters' keys: "d20261206" or "m202612"."""
    start = period_start(period, now)
    return start.strftime("d%Y%m%d" if period is Period.DAY else "m%Y%m")


@dataclass(frozen=True, slots=True)
class BudgetLine:
    """One budget in force: what it limits, its allowance and when it alerts."""

    id: str
    scope: Scope
    subject: str  # the key's or adapter's id; the tenant's for a tenant budget
    period: Period
    amount: int  # micro-units
    alert_bp: int  # alert once spend passes this share of `amount`

    def applies(self, key_id: str | None, adapter_id: str | None) -> bool:
        """Whether a request by `key_id` on `adapter_id` spends from this budget."""
        if self.scope is Scope.TENANT:
            return True
        wanted = key_id if self.scope is Scope.KEY else adapter_id
        return wanted is not None and wanted == self.subject

    def alert_at(self) -> int:
        """The spend (micro-units) past which the soft alert fires."""
        return self.amount * self.alert_bp // FULL_PERCENT_BP


def budget_name(line: BudgetLine) -> str:
    """How a refusal names a budget: "the key's daily budget"."""
    whose = {Scope.TENANT: "tenant's", Scope.KEY: "API key's", Scope.ADAPTER: "adapter's"}
    when = "daily" if line.period is Period.DAY else "monthly"
    return f"the {whose[line.scope]} {when} budget"
