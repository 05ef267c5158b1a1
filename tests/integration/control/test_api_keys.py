"""API keys: the secret is shown once, stored only as a hash, and stops working when revoked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from sqlalchemy.engine import make_url

from tests.conftest import Api


async def _stored_key_row(database_url: str, prefix: str) -> dict[str, object]:
    url = make_url(database_url)
    conn = await asyncpg.connect(
        user=url.username, host=url.host, port=url.port, database=url.database
    )
    try:
        row = await conn.fetchrow("SELECT * FROM api_keys WHERE prefix = $1", prefix)
    finally:
        await conn.close()
    return dict(row)


async def test_created_key_is_shown_once_and_works(make_tenant) -> None:
    tenant = await make_tenant()
    created = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/api-keys", json={"name": "ci", "scopes": ["read"]}
    )
    assert created.status_code == 201
    secret = created.json()["key"]
    listed = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/api-keys")).json()["items"]
    assert all("key" not in item for item in listed)
    assert created.json()["prefix"] in {item["prefix"] for item in listed}
    reader = Api(tenant.api.client, secret)
    assert (await reader.get(f"/api/v1/tenants/{tenant.id}")).status_code == 200


async def test_a_key_cannot_be_made_an_eval_runs_key_through_the_api(
    make_tenant, database_url: str
) -> None:
    tenant = await make_tenant()
    keys = f"/api/v1/tenants/{tenant.id}/api-keys"
    refused = await tenant.api.post(keys, json={"name": "e", "usage_kind": "eval"})
    assert refused.status_code == 400 and "usage_kind" in refused.text
    created = (await tenant.api.post(keys, json={"name": "i"})).json()
    assert (await _stored_key_row(database_url, created["prefix"]))["usage_kind"] == "inference"


async def test_only_a_hash_of_the_secret_is_stored(make_tenant, database_url: str) -> None:
    tenant = await make_tenant()
    created = (
        await tenant.api.post(f"/api/v1/tenants/{tenant.id}/api-keys", json={"name": "h"})
    ).json()
    row = await _stored_key_row(database_url, created["prefix"])
    stored = " ".join(str(v) for v in row.values())
    assert created["key"] not in stored
    secret = created["key"].split("_", 2)[2]  # the secret itself may contain "_"
    assert secret and secret not in stored


async def test_revoked_key_is_refused(make_tenant) -> None:
    tenant = await make_tenant()
    created = (
        await tenant.api.post(
            f"/api/v1/tenants/{tenant.id}/api-keys", json={"name": "r", "scopes": ["read"]}
        )
    ).json()
    revoked = await tenant.api.delete(f"/api/v1/tenants/{tenant.id}/api-keys/{created['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    response = await Api(tenant.api.client, created["key"]).get(f"/api/v1/tenants/{tenant.id}")
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


async def test_expired_key_is_refused(make_tenant, database_url: str) -> None:
    tenant = await make_tenant()
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    created = (
        await tenant.api.post(
            f"/api/v1/tenants/{tenant.id}/api-keys",
            json={"name": "e", "scopes": ["read"], "expires_at": soon},
        )
    ).json()
    url = make_url(database_url)
    conn = await asyncpg.connect(
        user=url.username, host=url.host, port=url.port, database=url.database
    )
    await conn.execute(
        "UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = $1",
        __import__("uuid").UUID(created["id"]),
    )
    await conn.close()
    response = await Api(tenant.api.client, created["key"]).get(f"/api/v1/tenants/{tenant.id}")
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


async def test_unknown_and_malformed_keys_are_refused(client) -> None:
    for header in ["Bearer lpx_0123456789_notarealsecret", "Bearer nonsense", "Basic abc", ""]:
        response = await client.get(
            "/api/v1/me", headers={"Authorization": header} if header else {}
        )
        assert response.status_code == 401, header
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_key_scopes_must_be_tenant_scopes(make_tenant) -> None:
    tenant = await make_tenant()
    response = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/api-keys", json={"name": "x", "scopes": ["operator"]}
    )
    assert response.status_code == 400
    assert "operator" in response.json()["detail"]


async def test_read_scope_cannot_write(make_tenant) -> None:
    tenant = await make_tenant()
    created = (
        await tenant.api.post(
            f"/api/v1/tenants/{tenant.id}/api-keys", json={"name": "ro", "scopes": ["read"]}
        )
    ).json()
    reader = Api(tenant.api.client, created["key"])
    response = await reader.post(
        f"/api/v1/tenants/{tenant.id}/api-keys", json={"name": "escalate", "scopes": ["admin"]}
    )
    assert response.status_code == 403
    assert "admin" in response.json()["detail"]


async def test_me_describes_the_calling_key(make_tenant, operator: Api) -> None:
    tenant = await make_tenant()
    me = (await tenant.api.get("/api/v1/me")).json()
    assert me["tenant_id"] == tenant.id and me["operator"] is False
    assert (await operator.get("/api/v1/me")).json()["operator"] is True


async def test_a_wrong_secret_with_a_known_prefix_is_refused_while_the_key_is_cached(
    make_tenant,
) -> None:
    # The prefix is shown in key listings; only the secret after it proves possession.
    tenant = await make_tenant()
    assert (await tenant.api.get(f"/api/v1/tenants/{tenant.id}")).status_code == 200  # cached
    brand, prefix, secret = tenant.api.key.split("_", 2)
    forged = f"{brand}_{prefix}_{'A' * len(secret)}"
    refused = await Api(tenant.api.client, forged).get(f"/api/v1/tenants/{tenant.id}")
    assert refused.status_code == 401
