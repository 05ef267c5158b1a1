"""The adapter page shows an alias's canary analysis: its policy and the latest decision
with its figures; a canary without traffic shows as waiting for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, htmx, sign_in
from tests.support.adapter_api import adapter_with_versions

ANALYSIS = {"window_s": 60, "min_requests": 5, "max_error_rate_diff": 0.02,
            "max_ttft_p95_ratio": 1.5}  # fmt: skip


async def test_a_canary_without_traffic_shows_as_waiting_for_it(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    await tenant.api.put(f"{aliases}/prod", json={"version": 1})
    body = {"version": 2, "weight": 10, "analysis": ANALYSIS}
    assert (await tenant.api.put(f"{aliases}/prod/canary", json=body)).status_code == 200
    for _ in range(50):  # the process's analyst runs every 2 s
        alias = (await tenant.api.get(f"{aliases}/prod")).json()
        if alias["canary_decision"]:
            break
        await asyncio.sleep(0.2)
    assert alias["canary_decision"]["verdict"] == "wait"
    assert alias["canary_decision"]["waiting_for_traffic"]

    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    html = (await browser_client.get(f"/console/adapters/{adapter}")).text

    panel = html.split('data-canary-analysis="prod"')[1]
    assert "Waiting for traffic" in panel and "0 of 5 requests" in panel
    assert "promoted after 60 s and 5 requests" in panel


async def test_a_sample_eval_shows_the_opt_in_and_the_prompts_kept_so_far(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    await tenant.api.put(f"{aliases}/prod", json={"version": 1})
    schema = {"type": "object", "properties": {"input": {"type": "array"}}}
    evaluation = await tenant.api.post("/v1/evals", json={
        "data_source_config": {"type": "custom", "item_schema": schema},
        "testing_criteria": [{"type": "string_check", "name": "polite", "operation": "ilike",
                              "input": "{{sample.output_text}}", "reference": "please"}],
    })  # fmt: skip
    eval_id = evaluation.json()["id"]
    sample = {"eval_id": eval_id, "sample_size": 8, "max_pass_rate_drop": 0.05}
    body = {"version": 2, "weight": 10, "analysis": {**ANALYSIS, "sample_eval": sample}}
    response = await tenant.api.put(f"{aliases}/prod/canary", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["canary_analysis"]["sample_eval"]["eval_id"] == eval_id
    for _ in range(50):  # the process's analyst runs every 2 s
        alias = (await tenant.api.get(f"{aliases}/prod")).json()
        if alias["canary_decision"]:
            break
        await asyncio.sleep(0.2)
    assert alias["canary_decision"]["figures"]["sample_eval"]["kept"] == 0

    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    html = (await browser_client.get(f"/console/adapters/{adapter}")).text

    panel = html.split('data-canary-analysis="prod"')[1]
    assert "the first 8 live prompts" in panel and eval_id in panel
    assert "Sample eval (0 of 8 live prompts kept)" in panel and "not started" in panel


async def test_an_analysis_policy_out_of_bounds_is_refused_naming_the_field(
    make_tenant, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    await tenant.api.put(f"{aliases}/prod", json={"version": 1})
    body = {"version": 2, "weight": 10, "analysis": {**ANALYSIS, "window_s": 10**9}}
    response = await tenant.api.put(f"{aliases}/prod/canary", json=body)
    assert response.status_code == 400 and "window_s" in response.text
    alias = (await tenant.api.get(f"{aliases}/prod")).json()
    assert alias["canary_version"] is None and alias["canary_analysis"] is None


async def test_the_console_switch_turns_the_analysis_on_with_the_defaults_and_off(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    form = f"/console/adapters/{adapter}/aliases"
    await browser_client.post(
        form, data={"alias": "prod", "version": 1}, headers=htmx(browser_client)
    )
    api = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases/prod"

    on = {"version": 2, "weight": 20, "analyse": "on"}
    await browser_client.post(f"{form}/prod/canary", data=on, headers=htmx(browser_client))
    assert (await tenant.api.get(api)).json()["canary_analysis"]["window_s"] == 600

    off = {"version": 2, "weight": 20}
    await browser_client.post(f"{form}/prod/canary", data=off, headers=htmx(browser_client))
    alias = (await tenant.api.get(api)).json()
    assert alias["canary_analysis"] is None and alias["canary_version"] == 2
