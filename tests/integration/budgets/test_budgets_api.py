"""Prices, budgets and the spend report through the control API (in-process app)."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from uuid import UUID

import pytest

from loraplex.db.config import sqlalchemy_config
from loraplex.gateway.usage import SpendKey, SqlUsageWriter, UsageRecorder
from loraplex.settings import Settings
from tests.conftest import Api, TenantHandle
from tests.support.adapter_api import ensure_tiny_base


@pytest.fixture
async def recorder(settings: Settings) -> AsyncIterator[UsageRecorder]:
    """A recorder writing to the test database, as the gateway's would."""
    config = sqlalchemy_config(settings)
    yield UsageRecorder(SqlUsageWriter(config.create_session_maker()))
    await config.get_engine().dispose()


async def _key_id(tenant: TenantHandle) -> str:
    keys = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/api-keys")).json()["items"]
    return str(keys[0]["id"])


async def test_an_operator_sets_a_price_that_tenants_read_but_cannot_change(
    operator: Api, make_tenant: object
) -> None:
    base = await ensure_tiny_base(operator)
    tenant = await make_tenant()  # type: ignore[operator]
    body = {"prompt": "0.15", "completion": "0.60", "training": "3"}
    assert (await operator.put(f"/api/v1/prices/{base}", json=body)).status_code == 200
    listed = (await tenant.api.get("/api/v1/prices")).json()
    assert {"base_model": base, "prompt": "0.15", "completion": "0.60", "training": "3.00",
            "currency": "USD", "per_tokens": 1_000_000} in listed  # fmt: skip
    refused = await tenant.api.put(f"/api/v1/prices/{base}", json=body)
    assert refused.status_code == 403


@pytest.mark.parametrize("amount", ["-1", "0.0000001", "1e999", "12,50", "9" * 40])
async def test_a_price_that_is_not_an_exact_amount_is_a_400_naming_it(
    operator: Api, amount: str
) -> None:
    base = await ensure_tiny_base(operator)
    response = await operator.put(f"/api/v1/prices/{base}", json={"prompt": amount})
    assert response.status_code == 400
    assert "prompt" in response.text


async def test_a_price_for_an_unknown_base_model_is_a_404(operator: Api) -> None:
    response = await operator.put("/api/v1/prices/no-such-model", json={"prompt": "1"})
    assert response.status_code == 404


async def test_a_tenant_admin_sets_a_key_budget_and_sees_its_spend_and_reset(
    make_tenant: object,
) -> None:
    tenant = await make_tenant()  # type: ignore[operator]
    budgets = f"/api/v1/tenants/{tenant.id}/budgets"
    body = {"scope": "key", "subject_id": await _key_id(tenant), "period": "day", "amount": "5"}
    created = await tenant.api.post(budgets, json=body)
    assert created.status_code == 201, created.text
    budget = created.json()
    assert (budget["amount"], budget["spent"], budget["alert_percent"]) == ("5.00", "0.00", "80")
    assert budget["resets_at"].endswith("T00:00:00Z")
    keys = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/api-keys")).json()["items"]
    assert budget["subject"] == f"key {keys[0]['prefix']}"
    assert (await tenant.api.post(budgets, json=body)).status_code == 409
    changed = await tenant.api.patch(f"{budgets}/{budget['id']}", json={"amount": "7.25"})
    assert changed.json()["amount"] == "7.25"
    assert [b["id"] for b in (await tenant.api.get(budgets)).json()["items"]] == [budget["id"]]
    assert (await tenant.api.delete(f"{budgets}/{budget['id']}")).status_code == 204


async def test_a_budget_on_another_tenants_key_is_a_404(make_tenant: object) -> None:
    mine, theirs = await make_tenant(), await make_tenant()  # type: ignore[operator]
    body = {"scope": "key", "subject_id": await _key_id(theirs), "period": "day", "amount": "1"}
    response = await mine.api.post(f"/api/v1/tenants/{mine.id}/budgets", json=body)
    assert response.status_code == 404


async def test_the_spend_report_sums_by_model_key_and_day_and_exports_csv(
    make_tenant: object, recorder: UsageRecorder
) -> None:
    tenant = await make_tenant()  # type: ignore[operator]
    key = UUID(await _key_id(tenant))
    for amount in (1_250_000, 250_000):
        recorder.record(UUID(tenant.id), None, "base-a", 10, 20,
                        spend=SpendKey(key, None, "base-a", amount))  # fmt: skip
    recorder.record(UUID(tenant.id), None, "base-b", 5, 5,
                    spend=SpendKey(key, None, "base-b", 10))  # fmt: skip
    await recorder.flush()
    report = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/spend")).json()
    assert report["total"] == "1.50001"
    assert [(m["name"], m["amount"], m["requests"]) for m in report["by_model"]] == [
        ("base-a", "1.50", 2), ("base-b", "0.00001", 1),
    ]  # fmt: skip
    assert len(report["by_key"]) == 1 and report["by_key"][0]["amount"] == "1.50001"
    exported = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/spend.csv")
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert sorted(r["amount"] for r in rows) == ["0.00001", "1.50"]
    assert {r["prompt_tokens"] for r in rows} == {"20", "5"}
