"""Tenant isolation across every route, driven by the app's own route table.

Every route must declare an access rule. For each route and method:
- a tenant route under /tenants/{tenant_id} called with another tenant's key answers 404;
- an operator route called with a tenant key answers 403;
- a tenant route without a tenant in its path must be listed in GLOBAL_TENANT_ROUTES with the
  reason it cannot leak another tenant's data.
A new route added without thinking about isolation fails this test.
"""

from __future__ import annotations

import re
import secrets
import uuid

from litestar import Litestar

from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_valid

# Tenant-accessible routes with no tenant in the path, and why they are safe.
GLOBAL_TENANT_ROUTES = {
    ("GET", "/api/v1/me"): "describes the calling key only",
    ("GET", "/api/v1/prices"): "prices are the deployment's, the same for every tenant",
    ("GET", "/api/v1/base-models"): "base models are shared by every tenant",
    ("GET", "/api/v1/base-models/{model_id:uuid}"): "base models are shared by every tenant",
    ("POST", "/v1/chat/completions"): "runs as the key's own tenant",
    ("POST", "/v1/completions"): "runs as the key's own tenant",
    ("POST", "/v1/responses"): "runs as the key's own tenant (and stores nothing)",
    ("GET", "/v1/models/{model:path}"): "base models, and the key's own tenant's adapters",
    ("GET", "/v1/models"): "lists the key's own tenant's adapters",
    (
        "GET",
        "/v1/chat/completions/{completion_id:str}/events",
    ): "the stream's owner is checked in Redis",
    ("GET", "/v1/completions/{completion_id:str}/events"): "the stream's owner is checked in Redis",
    ("POST", "/v1/files"): "stored under the key's own tenant",
    ("GET", "/v1/files"): "lists the key's own tenant's files",
    ("GET", "/v1/files/{file_id:str}"): "looked up within the key's tenant (else 404)",
    ("DELETE", "/v1/files/{file_id:str}"): "looked up within the key's tenant (else 404)",
    ("POST", "/v1/fine_tuning/jobs"): "created in the key's own tenant",
    ("GET", "/v1/fine_tuning/jobs"): "lists the key's own tenant's jobs",
    ("GET", "/v1/fine_tuning/jobs/{job_id:str}"): "looked up within the key's tenant (else 404)",
    (
        "GET",
        "/v1/fine_tuning/jobs/{job_id:str}/events",
    ): "looked up within the key's tenant (else 404)",
    (
        "GET",
        "/v1/fine_tuning/jobs/{job_id:str}/checkpoints",
    ): "looked up within the key's tenant (else 404)",
    (
        "POST",
        "/v1/fine_tuning/jobs/{job_id:str}/cancel",
    ): "looked up within the key's tenant (else 404)",
    ("POST", "/v1/evals"): "created in the key's own tenant",
    ("GET", "/v1/evals"): "lists the key's own tenant's evals",
    ("GET", "/v1/evals/{eval_id:str}"): "looked up within the key's tenant (else 404)",
    ("DELETE", "/v1/evals/{eval_id:str}"): "looked up within the key's tenant (else 404)",
    (
        "POST",
        "/v1/evals/{eval_id:str}/runs",
    ): "the eval is looked up within the key's tenant (else 404)",
    (
        "GET",
        "/v1/evals/{eval_id:str}/runs",
    ): "the eval is looked up within the key's tenant (else 404)",
    (
        "GET",
        "/v1/evals/{eval_id:str}/runs/{run_id:str}",
    ): "the eval is looked up within the key's tenant (else 404)",
    (
        "DELETE",
        "/v1/evals/{eval_id:str}/runs/{run_id:str}",
    ): "the eval is looked up within the key's tenant (else 404)",
    (
        "POST",
        "/v1/evals/{eval_id:str}/runs/{run_id:str}/cancel",
    ): "the eval is looked up within the key's tenant (else 404)",
    (
        "GET",
        "/v1/evals/{eval_id:str}/runs/{run_id:str}/output_items",
    ): "the eval is looked up within the key's tenant (else 404)",
    (
        "GET",
        "/v1/evals/{eval_id:str}/runs/{run_id:str}/output_items/{item_id:str}",
    ): "the eval is looked up within the key's tenant (else 404)",
}
SKIPPED_METHODS = {"OPTIONS", "HEAD"}


def _routes(app: Litestar) -> list[tuple[str, str, dict[str, object]]]:
    found = []
    for route in app.routes:
        for method, handler in getattr(route, "route_handler_map", {}).items():
            if method in SKIPPED_METHODS:
                continue
            handler = handler[0] if isinstance(handler, tuple) else handler
            found.append((method, route.path, dict(handler.opt)))
    return found


def _fill(path: str, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        default = {"uuid": str(uuid.uuid4()), "int": "1"}.get(match.group(2), "x")
        return values.get(name, default)

    return re.sub(r"\{(\w+):(\w+)\}", value, path)


async def test_every_route_declares_an_access_rule(app: Litestar) -> None:
    undeclared = [
        (m, p)
        for m, p, opt in _routes(app)
        if opt.get("access") not in {"public", "operator", "tenant", "session", "agent"}
    ]
    assert undeclared == []


async def test_another_tenants_objects_are_not_found_on_every_route(
    app: Litestar, make_tenant, operator: Api, tmp_path
) -> None:
    owner, intruder = await make_tenant(), await make_tenant()
    user = await owner.api.post(
        f"/api/v1/tenants/{owner.id}/users", json={"email": f"u{secrets.token_hex(3)}@example.com"}
    )
    key = await owner.api.post(f"/api/v1/tenants/{owner.id}/api-keys", json={"name": "k"})
    await ensure_tiny_base(operator)
    adapter = await create_adapter(owner.api, owner.id)
    await upload_valid(owner.api, owner.id, adapter, tmp_path / "v1")
    assert (
        await owner.api.put(
            f"/api/v1/tenants/{owner.id}/adapters/{adapter}/aliases/prod", json={"version": 1}
        )
    ).status_code == 200
    ids = {
        "tenant_id": owner.id,
        "user_id": user.json()["id"],
        "key_id": key.json()["id"],
        "adapter": adapter,
        "number": "1",
        "alias": "prod",
        "filename": "adapter_model.safetensors",
    }
    checked = 0
    for method, path, opt in _routes(app):
        if "{tenant_id" not in path or opt.get("access") != "tenant":
            continue  # operator routes answer 403 to any tenant key (tested below)
        response = await intruder.api.request(method, _fill(path, ids), json={})
        assert response.status_code == 404, f"{method} {path} answered {response.status_code}"
        checked += 1
    assert checked >= 20  # grows as routes are added
    # and nothing was changed by the attempts
    assert len((await owner.api.get(f"/api/v1/tenants/{owner.id}/users")).json()["items"]) == 1
    keys = (await owner.api.get(f"/api/v1/tenants/{owner.id}/api-keys")).json()["items"]
    assert all(k["revoked_at"] is None for k in keys)
    version = (
        await owner.api.get(f"/api/v1/tenants/{owner.id}/adapters/{adapter}/versions/1")
    ).json()
    assert version["status"] == "ready"
    alias = (
        await owner.api.get(f"/api/v1/tenants/{owner.id}/adapters/{adapter}/aliases/prod")
    ).json()
    assert alias["version"] == 1


async def test_operator_routes_refuse_tenant_keys(app: Litestar, make_tenant) -> None:
    tenant = await make_tenant()
    for method, path, opt in _routes(app):
        if opt.get("access") != "operator":
            continue
        response = await tenant.api.request(method, _fill(path, {"tenant_id": tenant.id}), json={})
        assert response.status_code == 403, f"{method} {path} answered {response.status_code}"


async def test_tenant_routes_without_a_tenant_in_the_path_are_reviewed(app: Litestar) -> None:
    unreviewed = [
        (m, p)
        for m, p, opt in _routes(app)
        if opt.get("access") == "tenant"
        and "{tenant_id" not in p
        and (m, p) not in GLOBAL_TENANT_ROUTES
    ]
    assert unreviewed == []


async def test_routes_refuse_requests_without_a_key(app: Litestar, client) -> None:
    for method, path, opt in _routes(app):
        if opt.get("access") in ("public", "session"):
            continue
        response = await client.request(method, _fill(path, {}), json={})
        assert response.status_code == 401, f"{method} {path} answered {response.status_code}"


async def test_console_routes_without_a_session_lead_to_sign_in(app: Litestar, client) -> None:
    """Every browser-UI route but sign-in itself: even with a valid CSRF token, no session
    means the sign-in page, never the data or the change."""
    open_paths = {
        "/",
        "/login",
        "/logout",
        "/static/{file_path:path}",
        "/login/sso/{name:str}",  # single sign-on starts and ends before any session
        "/login/sso/{name:str}/callback",
    }
    client.cookies.clear()
    await client.get("/login")  # the CSRF cookie, so what is checked is the session
    csrf = {"x-csrftoken": client.cookies["csrftoken"]}
    try:
        for method, path, opt in _routes(app):
            if opt.get("access") != "session" or path in open_paths:
                continue
            response = await client.request(
                method, _fill(path, {}), headers=csrf, follow_redirects=False
            )
            where = response.headers.get("location")
            assert where == "/login", f"{method} {path} answered {response.status_code}"
    finally:
        client.cookies.clear()


async def test_operator_sees_every_tenant(operator: Api, make_tenant) -> None:
    tenant = await make_tenant()
    assert (await operator.get(f"/api/v1/tenants/{tenant.id}/api-keys")).status_code == 200
