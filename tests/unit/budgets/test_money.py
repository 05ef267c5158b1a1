"""The money policy: exact amounts, costs rounded once and up, discounts, UTC periods."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loraplex.control.budgets.money import (
    BudgetLine,
    Period,
    Price,
    Scope,
    budget_name,
    cost,
    format_amount,
    parse_amount,
    parse_percent,
    period_label,
    period_reset,
)
from loraplex.errors import InvalidInput

COUNTS = st.integers(min_value=0, max_value=10**7)
PRICES = st.integers(min_value=0, max_value=10**12)


def test_an_amount_is_parsed_exactly_and_printed_back() -> None:
    assert parse_amount("0.1", param="amount") == 100_000
    assert parse_amount("12.50", param="amount") == 12_500_000
    assert format_amount(12_500_000) == "12.50"
    assert format_amount(150) == "0.00015"


@pytest.mark.parametrize(
    "text",
    [
        "-1",
        "1e400",
        "1e999999999",
        "1e-999999999",
        "-0.0000001",
        "NaN",
        "Infinity",
        "0.0000001",
        "abc",
        "1" * 40,
    ],
)
def test_a_bad_amount_is_a_400_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_amount(text, param="amount")
    assert refused.value.param == "amount"


def test_a_percentage_is_basis_points_at_most_a_hundred() -> None:
    assert parse_percent("12.5", param="p") == 1250
    with pytest.raises(InvalidInput):
        parse_percent("100.01", param="p")
    with pytest.raises(InvalidInput):
        parse_percent("1.001", param="p")


def test_a_cost_is_rounded_up_once_over_the_whole_request() -> None:
    price = Price(prompt=150_000, completion=600_000)  # 0.15 and 0.60 per 1M tokens
    # 10 prompt tokens = 1.5 micro-units, 10 completion tokens = 6: 7.5 -> 8, not 2 + 6.
    assert cost(price, prompt=10, completion=10) == 8


def test_a_plan_discount_comes_off_the_price() -> None:
    price = Price(prompt=1_000_000).discounted(2500)  # 25 % off 1.00 per 1M tokens
    assert cost(price, prompt=1_000_000) == 750_000


@given(COUNTS, COUNTS, COUNTS, COUNTS, PRICES, PRICES, st.integers(0, 10_000))
def test_a_reservation_never_costs_less_than_what_the_request_then_uses(
    prompt: int, completion: int, used_prompt: int, used_completion: int,
    prompt_price: int, completion_price: int, discount: int,
) -> None:  # fmt: skip
    price = Price(prompt_price, completion_price).discounted(discount)
    used_prompt, used_completion = min(used_prompt, prompt), min(used_completion, completion)
    reserved = cost(price, prompt=prompt, completion=completion)
    assert cost(price, prompt=used_prompt, completion=used_completion) <= reserved


@given(COUNTS, COUNTS, PRICES, PRICES)
def test_a_cost_is_within_one_micro_unit_of_the_exact_price(
    prompt: int, completion: int, prompt_price: int, completion_price: int
) -> None:
    exact = Fraction(prompt * prompt_price + completion * completion_price, 10**6)
    charged = cost(Price(prompt_price, completion_price), prompt=prompt, completion=completion)
    assert exact <= charged < exact + 1


def test_a_day_resets_at_the_next_utc_midnight_and_a_month_on_the_first() -> None:
    now = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert period_reset(Period.DAY, now) == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_reset(Period.MONTH, now) == datetime(2027, 1, 1, tzinfo=UTC)
    feb = datetime(2027, 2, 10, tzinfo=UTC)
    assert period_reset(Period.MONTH, feb) == datetime(2027, 3, 1, tzinfo=UTC)
    assert period_label(Period.DAY, now) == "d20261231"
    assert period_label(Period.MONTH, feb) == "m202702"


def test_a_budget_applies_to_its_own_key_or_adapter_only() -> None:
    key_budget = BudgetLine("b", Scope.KEY, "k1", Period.DAY, 1, 8000)
    tenant_budget = BudgetLine("t", Scope.TENANT, "", Period.MONTH, 1, 8000)
    assert key_budget.applies("k1", None) and not key_budget.applies("k2", "k1")
    assert tenant_budget.applies(None, None)
    assert budget_name(key_budget) == "the API key's daily budget"
