"""A key stops working when the user it was made for is removed, on every route, at once."""

from __future__ import annotations

import secrets
from uuid import UUID

from litestar.testing import AsyncTestClient

from loraplex.control.keys.schemas import KeyCreate
from loraplex.control.keys.service import ApiKeyService
from loraplex.db.config import sqlalchemy_config
from loraplex.settings import Settings
from tests.conftest import Api


async def key_of_user(settings: Settings, tenant_id: str, user_id: str) -> str:
    """A tenant key made for the user (as the console makes one for its signed-in user)."""
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        created = await ApiKeyService(session=session).create_tenant_key(
            UUID(tenant_id), KeyCreate(name="mine", scopes=["admin", "inference"]), "test",
            user_id=UUID(user_id),
        )  # fmt: skip
        await session.commit()
    await config.get_engine().dispose()
    return created.key


async def new_user(tenant) -> str:
    """A user of the tenant; returns its id."""
    email = f"u-{secrets.token_hex(3)}@example.com"
    made = await tenant.api.post(f"/api/v1/tenants/{tenant.id}/users", json={"email": email})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def test_removing_a_user_revokes_their_keys_and_the_keys_they_made(
    make_tenant, settings: Settings, client: AsyncTestClient
) -> None:
    tenant = await make_tenant()
    user = await new_user(tenant)
    own = Api(client, await key_of_user(settings, tenant.id, user))
    keys = f"/api/v1/tenants/{tenant.id}/api-keys"
    assert (await own.get("/api/v1/me")).status_code == 200
    made = await own.post(keys, json={"name": "made-by-the-user", "scopes": ["read"]})
    assert made.status_code == 201, made.text
    derived = Api(client, made.json()["key"])
    assert (await derived.get("/api/v1/me")).status_code == 200

    removed = await tenant.api.delete(f"/api/v1/tenants/{tenant.id}/users/{user}")
    assert removed.status_code == 204

    for key in (own, derived):
        refused = await key.get("/api/v1/me")
        assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
    listed = (await tenant.api.get(keys, params={"page_size": 100})).json()["items"]
    revoked = {k["name"] for k in listed if k["revoked_at"]}
    assert {"mine", "made-by-the-user"} <= revoked
    assert (await tenant.api.get("/api/v1/me")).status_code == 200  # nobody's key lives on


async def test_another_users_keys_keep_working(
    make_tenant, settings: Settings, client: AsyncTestClient
) -> None:
    tenant = await make_tenant()
    leaving, staying = await new_user(tenant), await new_user(tenant)
    kept = Api(client, await key_of_user(settings, tenant.id, staying))
    await key_of_user(settings, tenant.id, leaving)
    assert (
        await tenant.api.delete(f"/api/v1/tenants/{tenant.id}/users/{leaving}")
    ).status_code == 204
    assert (await kept.get("/api/v1/me")).status_code == 200


async def test_a_deactivated_users_key_is_refused(
    make_tenant, settings: Settings, client: AsyncTestClient
) -> None:
    from sqlalchemy import update

    from loraplex.db.models import User

    tenant = await make_tenant()
    user = await new_user(tenant)
    key = Api(client, await key_of_user(settings, tenant.id, user))
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        await session.execute(update(User).where(User.id == UUID(user)).values(is_active=False))
        await session.commit()
    await config.get_engine().dispose()
    refused = await key.get("/api/v1/me")
    assert refused.status_code == 401 and "no longer active" in refused.json()["detail"]
