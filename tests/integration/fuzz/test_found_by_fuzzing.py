"""What the fuzzer found, each pinned: a clear 4xx (or a documented 503), never a 500."""

from __future__ import annotations

import secrets
from typing import Any

from tests.conftest import Api
from tests.integration.fuzz.fuzzing import BASE_MODEL

USER = [{"role": "user", "content": "hi"}]


async def test_a_nul_character_in_text_is_a_400_naming_it_not_a_500(make_tenant: Any) -> None:
    """PostgreSQL cannot compare or store NUL in text; the client is told, not given a 500."""
    tenant = await make_tenant()
    response = await tenant.api.post(
        "/v1/chat/completions", json={"model": "a\u0000b", "messages": USER}
    )
    assert response.status_code == 400, response.text
    assert "NUL" in response.json()["error"]["message"]
    response = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/a%00b")
    assert response.status_code == 400, response.text
    assert "NUL" in response.json()["detail"]


async def test_inference_no_engine_can_serve_is_a_503_with_retry_after(
    operator: Api, make_tenant: Any
) -> None:
    """A base model with no engine in rotation: 503 engine_unavailable, not a 502."""
    base = f"fuzz-base-{secrets.token_hex(3)}"
    response = await operator.post("/api/v1/base-models", json={**BASE_MODEL, "name": base})
    assert response.status_code == 201, response.text
    tenant = await make_tenant()
    for path, body in [
        ("/v1/chat/completions", {"model": base, "messages": USER}),
        ("/v1/completions", {"model": base, "prompt": "hi"}),
        ("/v1/responses", {"model": base, "input": "hi"}),
    ]:
        response = await tenant.api.post(path, json=body)
        assert response.status_code == 503, (path, response.text)
        assert response.json()["error"]["code"] == "engine_unavailable"
        assert response.headers["retry-after"].isdigit()


async def test_an_adapter_for_a_tenant_that_does_not_exist_is_a_404_naming_it(
    operator: Api,
) -> None:
    """Found with a seed other than the suite's: an operator may name any tenant id."""
    base = f"fuzz-base-{secrets.token_hex(3)}"
    response = await operator.post("/api/v1/base-models", json={**BASE_MODEL, "name": base})
    assert response.status_code == 201, response.text
    missing = "00000000-0000-4000-8000-000000000000"
    response = await operator.post(
        f"/api/v1/tenants/{missing}/adapters", json={"name": "bot", "base_model": base}
    )
    assert response.status_code == 404, response.text
    assert missing in response.json()["detail"]


async def test_a_deleted_tenant_s_objects_are_a_404_naming_it_not_an_empty_list(
    operator: Api,
) -> None:
    """Found by the stateful fuzzer (use after free): after DeleteTenant, ListAdapters as the
    operator answered 200 with no items. Its objects are 404 now; its history stays readable."""
    slug = f"gone-{secrets.token_hex(4)}"
    response = await operator.post("/api/v1/tenants", json={"slug": slug, "name": slug})
    assert response.status_code == 201, response.text
    tenant = response.json()["id"]
    response = await operator.delete(f"/api/v1/tenants/{tenant}")
    assert response.status_code == 204, response.text
    for route in ("adapters", "api-keys", "users", "quota"):
        response = await operator.get(f"/api/v1/tenants/{tenant}/{route}")
        assert response.status_code == 404, (route, response.text)
        assert tenant in response.json()["detail"]
    for route in ("audit", "usage"):
        response = await operator.get(f"/api/v1/tenants/{tenant}/{route}")
        assert response.status_code == 200, (route, response.text)


async def test_a_tenant_id_that_names_no_tenant_is_a_404_on_every_tenant_route(
    operator: Api,
) -> None:
    """An operator may name any id; one that is no tenant is never an empty list."""
    missing = "00000000-0000-4000-8000-000000000000"
    for route in ("adapters", "api-keys", "users", "audit", "usage"):
        response = await operator.get(f"/api/v1/tenants/{missing}/{route}")
        assert response.status_code == 404, (route, response.text)
        assert missing in response.json()["detail"]
