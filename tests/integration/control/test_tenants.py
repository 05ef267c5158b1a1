"""Tenants: operators create, change, suspend and delete them; every change is audited."""

from __future__ import annotations

import secrets

from tests.conftest import Api


async def test_operator_creates_lists_and_reads_a_tenant(operator: Api) -> None:
    slug = f"acme-{secrets.token_hex(3)}"
    created = await operator.post(
        "/api/v1/tenants", json={"slug": slug, "name": "Acme", "plan": "pro"}
    )
    assert created.status_code == 201
    body = created.json()
    assert body["slug"] == slug and body["plan"] == "pro" and body["status"] == "active"
    assert slug in await _every_slug(operator)
    fetched = await operator.get(f"/api/v1/tenants/{body['id']}")
    assert fetched.json()["name"] == "Acme"


async def test_tenant_key_reads_its_own_tenant(make_tenant) -> None:
    tenant = await make_tenant()
    response = await tenant.api.get(f"/api/v1/tenants/{tenant.id}")
    assert response.status_code == 200
    assert response.json()["slug"] == tenant.slug


async def test_update_changes_name_and_plan(operator: Api, make_tenant) -> None:
    tenant = await make_tenant()
    response = await operator.patch(
        f"/api/v1/tenants/{tenant.id}", json={"name": "Renamed", "plan": "free"}
    )
    assert response.status_code == 200
    assert response.json()["name"] == "Renamed" and response.json()["plan"] == "free"


async def test_suspended_tenant_keys_are_refused_at_once_until_resumed(
    operator: Api, make_tenant
) -> None:
    tenant = await make_tenant()
    assert (await operator.post(f"/api/v1/tenants/{tenant.id}/suspend")).json()[
        "status"
    ] == "suspended"
    refused = await tenant.api.get(f"/api/v1/tenants/{tenant.id}")
    assert refused.status_code == 403
    assert "suspended" in refused.json()["detail"]
    await operator.post(f"/api/v1/tenants/{tenant.id}/resume")
    assert (await tenant.api.get(f"/api/v1/tenants/{tenant.id}")).status_code == 200


async def test_deleted_tenant_is_gone(operator: Api, make_tenant) -> None:
    tenant = await make_tenant()
    assert (await operator.delete(f"/api/v1/tenants/{tenant.id}")).status_code == 204
    assert (await operator.get(f"/api/v1/tenants/{tenant.id}")).status_code == 404
    listed = await operator.get("/api/v1/tenants", params={"page_size": 100})
    assert tenant.id not in {t["id"] for t in listed.json()["items"]}


async def test_quota_shows_plan_overrides_and_effective_limits(operator: Api, make_tenant) -> None:
    tenant = await make_tenant(plan="free")
    response = await operator.put(
        f"/api/v1/tenants/{tenant.id}/quota",
        json={"overrides": {"max_adapters": 50, "requests_per_minute": 7}},
    )
    assert response.status_code == 200
    quota = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/quota")).json()
    assert quota["plan"] == "free"
    assert quota["overrides"] == {"max_adapters": 50, "requests_per_minute": 7}
    assert quota["effective"]["max_adapters"] == 50
    assert quota["effective"]["max_rank"] == quota["plan_limits"]["max_rank"]


async def test_tenant_cannot_raise_its_own_quota(make_tenant) -> None:
    tenant = await make_tenant()
    response = await tenant.api.put(
        f"/api/v1/tenants/{tenant.id}/quota", json={"overrides": {"max_adapters": 9999}}
    )
    assert response.status_code == 403


async def test_changes_are_written_to_the_audit_log(operator: Api, make_tenant) -> None:
    tenant = await make_tenant()
    await operator.patch(f"/api/v1/tenants/{tenant.id}", json={"name": "Audited"})
    entries = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/audit")).json()["items"]
    actions = [e["action"] for e in entries]
    assert {"tenant.create", "api_key.create", "tenant.update"} <= set(actions)
    assert all(e["tenant_id"] == tenant.id for e in entries)
    assert all(e["actor"].startswith("key:") for e in entries)


async def test_operator_upserts_a_plan(operator: Api) -> None:
    name = f"custom-{secrets.token_hex(2)}"
    response = await operator.put("/api/v1/plans", json={"name": name, "limits": {"max_rank": 8}})
    assert response.status_code == 200
    plans = (await operator.get("/api/v1/plans", params={"page_size": 100})).json()["items"]
    assert {"free", "pro", "enterprise", name} <= {p["name"] for p in plans}


async def _every_slug(operator: Api) -> set[str]:
    """Every tenant's slug, page by page (the suite's other tests make many tenants)."""
    slugs: set[str] = set()
    for page in range(1, 1000):
        listed = await operator.get("/api/v1/tenants", params={"page_size": 100, "page": page})
        body = listed.json()
        slugs.update(t["slug"] for t in body["items"])
        if not body["items"] or len(slugs) >= body["total"]:
            break
    return slugs
