"""A fine-tune's eval gate is checked when the job is created: a bad gate is a 4xx naming
the problem and no job is recorded."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.support.adapter_api import ensure_tiny_base, upload_training_file

ROWS = [
    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(12)
]
TEMPLATE = {"type": "template", "template": [{"role": "user", "content": "{{item.q}}"}]}


async def _tenant_with_eval(make_tenant: Any, operator: Api) -> tuple[Any, str, str, str]:
    tenant = await make_tenant()
    base = await ensure_tiny_base(operator)
    file_id = await upload_training_file(tenant.api, ROWS)
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    created = await tenant.api.post(
        "/v1/evals",
        json={
            "data_source_config": {"type": "custom", "item_schema": schema},
            "testing_criteria": [
                {
                    "type": "string_check",
                    "name": "c",
                    "operation": "eq",
                    "input": "{{sample.output_text}}",
                    "reference": "x",
                }
            ],
        },
    )
    assert created.status_code == 200, created.text
    return tenant, base, file_id, created.json()["id"]


def _gate(eval_id: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    source = {"type": "file_content", "content": [{"item": item} for item in items]}
    return {
        "eval_id": eval_id,
        "threshold": 0.5,
        "data_source": {"source": source, "input_messages": TEMPLATE},
    }


async def _request_job(
    tenant: Any, base: str, file_id: str, gate: dict[str, Any], **more: Any
) -> Any:
    """POST a fine-tuning job of `base` on `file_id` with the eval gate `gate` (and `more`)."""
    body = {"model": base, "training_file": file_id, "eval_gate": gate, **more}
    return await tenant.api.post("/v1/fine_tuning/jobs", json=body)


async def _jobs(tenant: Any) -> list[Any]:
    return list((await tenant.api.get("/v1/fine_tuning/jobs")).json()["data"])


async def test_a_gate_without_an_alias_is_refused(make_tenant: Any, operator: Api) -> None:
    tenant, base, file_id, eval_id = await _tenant_with_eval(make_tenant, operator)
    response = await _request_job(tenant, base, file_id, _gate(eval_id, [{"q": "a"}]))
    assert response.status_code == 400 and "needs an alias" in response.text
    assert await _jobs(tenant) == []


async def test_a_gate_whose_items_do_not_match_the_eval_is_refused(
    make_tenant: Any, operator: Api
) -> None:
    tenant, base, file_id, eval_id = await _tenant_with_eval(make_tenant, operator)
    response = await _request_job(tenant, base, file_id, _gate(eval_id, [{"q": 1}]), alias="prod")
    assert response.status_code == 400 and "does not match" in response.text
    assert await _jobs(tenant) == []


async def test_a_gate_on_another_tenants_eval_is_not_found(make_tenant: Any, operator: Api) -> None:
    _, _, _, other_eval = await _tenant_with_eval(make_tenant, operator)
    tenant, base, file_id, _ = await _tenant_with_eval(make_tenant, operator)
    response = await _request_job(
        tenant, base, file_id, _gate(other_eval, [{"q": "a"}]), alias="prod"
    )
    assert response.status_code == 404 and "No such eval" in response.text
    assert await _jobs(tenant) == []


async def test_another_tenants_eval_and_its_runs_are_not_found(
    make_tenant: Any, operator: Api
) -> None:
    owner, _, _, eval_id = await _tenant_with_eval(make_tenant, operator)
    intruder = await make_tenant()
    run = {
        "data_source": {
            "type": "completions",
            "model": "m",
            "input_messages": TEMPLATE,
            "source": {"type": "file_content", "content": [{"item": {"q": "a"}}]},
        }
    }
    for method, path, body in [
        ("GET", f"/v1/evals/{eval_id}", None),
        ("DELETE", f"/v1/evals/{eval_id}", None),
        ("GET", f"/v1/evals/{eval_id}/runs", None),
        ("POST", f"/v1/evals/{eval_id}/runs", run),
    ]:
        response = await intruder.api.request(method, path, json=body)
        assert response.status_code == 404, f"{method} {path}: {response.status_code}"
    assert (await owner.api.get(f"/v1/evals/{eval_id}")).status_code == 200
