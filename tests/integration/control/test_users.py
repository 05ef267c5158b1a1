"""Users of a tenant: created with argon2 password hashes, unique emails."""

from __future__ import annotations

import secrets


async def test_tenant_admin_creates_and_deletes_a_user(make_tenant) -> None:
    tenant = await make_tenant()
    email = f"dev-{secrets.token_hex(3)}@example.com"
    created = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/users",
        json={"email": email, "role": "tenant_admin", "password": "correct horse"},
    )
    assert created.status_code == 201
    assert "password" not in created.text and "argon2" not in created.text
    listed = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/users")).json()["items"]
    assert [u["email"] for u in listed] == [email]
    assert (
        await tenant.api.delete(f"/api/v1/tenants/{tenant.id}/users/{created.json()['id']}")
    ).status_code == 204
    assert (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/users")).json()["items"] == []


async def test_duplicate_email_is_a_conflict(make_tenant) -> None:
    tenant = await make_tenant()
    body = {"email": f"dup-{secrets.token_hex(3)}@example.com"}
    assert (
        await tenant.api.post(f"/api/v1/tenants/{tenant.id}/users", json=body)
    ).status_code == 201
    again = await tenant.api.post(f"/api/v1/tenants/{tenant.id}/users", json=body)
    assert again.status_code == 409
    assert body["email"] in again.json()["detail"]


async def test_tenant_cannot_create_an_operator_user(make_tenant) -> None:
    tenant = await make_tenant()
    response = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/users",
        json={"email": f"x{secrets.token_hex(2)}@example.com", "role": "operator"},
    )
    assert response.status_code == 400
