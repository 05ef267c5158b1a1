"""Which tenant tripped which limit: a refusal by a limit is counted by reason and noted in
that tenant's audit log, once per limit however often it is tripped."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY

DEEP = b'{"model":"m","messages":' + b"[" * 70_000 + b"]" * 70_000 + b"}"


async def _limit_entries(tenant: Any) -> list[dict[str, Any]]:
    for _ in range(50):
        entries = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/audit")).json()["items"]
        found = [e["details"] for e in entries if e["action"] == "tenant.limit_refused"]
        if found:
            return found
        await asyncio.sleep(0.1)  # the log writes in the background
    return []


async def test_a_tripped_limit_is_counted_and_audited_once_for_its_tenant(make_tenant: Any) -> None:
    tenant = await make_tenant(plan="free")
    headers = {"Content-Type": "application/json"}
    for _ in range(5):
        refused = await tenant.api.post("/v1/chat/completions", content=DEEP, headers=headers)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "body_too_complex"

    entries = await _limit_entries(tenant)

    assert [e["limit"] for e in entries] == ["body_too_complex"]
    counted = REGISTRY.get_sample_value(
        "loraplex_tenant_limit_refusals_total",
        {"tenant": tenant.id, "reason": "body_too_complex"},
    )
    assert counted == 5
