"""Bad input gets a clear 4xx in the problem-details shape, and nothing is half-written."""

from __future__ import annotations

import secrets

import pytest

from tests.conftest import Api

PROBLEM = "application/problem+json"


async def _tenant_count(operator: Api) -> int:
    return (await operator.get("/api/v1/tenants", params={"page_size": 1})).json()["total"]


def _is_problem(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["detail"]
    return body


async def test_malformed_json_is_a_400(operator: Api) -> None:
    before = await _tenant_count(operator)
    response = await operator.post(
        "/api/v1/tenants", content=b'{"slug": "a",', headers={"content-type": "application/json"}
    )
    _is_problem(response, 400)
    assert await _tenant_count(operator) == before


@pytest.mark.parametrize(
    "body, field",
    [
        ({"slug": 5, "name": "x"}, "slug"),
        ({"slug": "Not A Slug!", "name": "x"}, "slug"),
        ({"slug": "ok-slug", "name": ""}, "name"),
        ({"name": "missing slug"}, "slug"),
    ],
)
async def test_wrong_types_and_values_name_the_field(operator: Api, body: dict, field: str) -> None:
    before = await _tenant_count(operator)
    problem = _is_problem(await operator.post("/api/v1/tenants", json=body), 400)
    assert field in problem["detail"]
    assert await _tenant_count(operator) == before


async def test_unknown_fields_are_refused(operator: Api) -> None:
    problem = _is_problem(
        await operator.post("/api/v1/tenants", json={"slug": "u-x", "name": "x", "colour": "red"}),
        400,
    )
    assert "colour" in problem["detail"]


async def test_unknown_plan_is_refused(operator: Api) -> None:
    problem = _is_problem(
        await operator.post(
            "/api/v1/tenants",
            json={"slug": f"p-{secrets.token_hex(2)}", "name": "x", "plan": "platinum"},
        ),
        400,
    )
    assert "platinum" in problem["detail"]


async def test_oversized_body_is_a_413(operator: Api, settings) -> None:
    huge = "x" * (settings.max_json_body_bytes + 10)
    response = await operator.post("/api/v1/tenants", json={"slug": "big", "name": huge})
    _is_problem(response, 413)


@pytest.mark.parametrize(
    "params", [{"page": 0}, {"page": -1}, {"page_size": 0}, {"page_size": 10_000}, {"page": "two"}]
)
async def test_bad_pagination_is_a_400(operator: Api, params: dict) -> None:
    _is_problem(await operator.get("/api/v1/tenants", params=params), 400)


async def test_duplicate_slug_is_a_409_naming_it(operator: Api) -> None:
    slug = f"dup-{secrets.token_hex(3)}"
    assert (
        await operator.post("/api/v1/tenants", json={"slug": slug, "name": "a"})
    ).status_code == 201
    before = await _tenant_count(operator)
    problem = _is_problem(
        await operator.post("/api/v1/tenants", json={"slug": slug, "name": "b"}), 409
    )
    assert slug in problem["detail"]
    assert await _tenant_count(operator) == before


async def test_tenant_key_on_operator_route_is_a_403(make_tenant) -> None:
    tenant = await make_tenant()
    _is_problem(await tenant.api.get("/api/v1/tenants"), 403)
    _is_problem(await tenant.api.post("/api/v1/tenants", json={"slug": "sneaky", "name": "x"}), 403)


async def test_unknown_quota_name_is_refused(operator: Api, make_tenant) -> None:
    tenant = await make_tenant()
    problem = _is_problem(
        await operator.put(f"/api/v1/tenants/{tenant.id}/quota", json={"overrides": {"gpus": 3}}),
        400,
    )
    assert "gpus" in problem["detail"]
    problem = _is_problem(
        await operator.put(
            f"/api/v1/tenants/{tenant.id}/quota", json={"overrides": {"max_rank": -1}}
        ),
        400,
    )
    assert "max_rank" in problem["detail"]


async def test_not_a_uuid_in_the_path_is_a_problem_404(operator: Api) -> None:
    # A tenant path takes only a UUID, so no route matches: no such tenant, not a bad request.
    _is_problem(await operator.get("/api/v1/tenants/not-a-uuid"), 404)


async def test_unknown_route_is_a_problem_404(operator: Api) -> None:
    _is_problem(await operator.get("/api/v1/nothing-here"), 404)


async def test_base_model_with_bad_module_shapes_is_refused(operator: Api) -> None:
    body = {
        "name": f"m{secrets.token_hex(2)}",
        "source": "/models/x",
        "architecture": "LlamaForCausalLM",
        "hidden_size": 64,
        "num_layers": 2,
        "vocab_size": 100,
        "max_context": 128,
        "modules": {"q_proj": [64]},
    }
    problem = _is_problem(await operator.post("/api/v1/base-models", json=body), 400)
    assert "q_proj" in problem["detail"]
