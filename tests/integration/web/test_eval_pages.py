"""The console's eval pages: the evals list, a run's graded items (paged), and an adapter's
eval scores by version; another tenant's run is a 404 and its evals are not listed."""

from __future__ import annotations

from pathlib import Path

from loraplex.web.eval_reads import ITEMS_PER_PAGE
from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, sign_in
from tests.support.adapter_api import adapter_with_versions
from tests.support.eval_rows import CRITERION, graded_run, make_eval


async def test_eval_pages_show_a_runs_items_and_each_versions_scores_to_its_tenant_only(
    browser_client, make_tenant, make_user, operator: Api, settings, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    eval_id = await make_eval(tenant)
    gate_run = await graded_run(
        settings,
        tenant,
        eval_id,
        f"{adapter}@v1",
        [("Capital of France?", "Paris", True), ("Capital of Peru?", "Quito", False)],
        gate_version=(adapter, 1),
    )
    many = [(f"question {n}", f"answer {n}", True) for n in range(ITEMS_PER_PAGE + 3)]
    v2_run = await graded_run(settings, tenant, eval_id, f"{adapter}@v2", many)
    await graded_run(settings, tenant, eval_id, f"{adapter}@prod", [("q", "a", False)])
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)

    listed = await browser_client.get("/console/evals/")
    assert listed.status_code == 200
    assert f'data-eval="{eval_id}"' in listed.text
    assert f"/console/evals/{eval_id}/runs/{gate_run}" in listed.text

    run = await browser_client.get(f"/console/evals/{eval_id}/runs/{gate_run}")
    assert run.status_code == 200
    peru = run.text.split('data-item="1"')[1].split("</tr>")[0]
    assert "Capital of Peru?" in peru and "Quito" in peru
    assert f'data-grader="{CRITERION}">{CRITERION}: fail (score 0)' in peru
    assert "data-pass-rate>50%" in run.text

    first = await browser_client.get(f"/console/evals/{eval_id}/runs/{v2_run}")
    last = await browser_client.get(f"/console/evals/{eval_id}/runs/{v2_run}?page=2")
    assert first.text.count("data-item=") == ITEMS_PER_PAGE
    assert last.text.count("data-item=") == 3 and "Page 2 of 2" in last.text

    page = (await browser_client.get(f"/console/adapters/{adapter}")).text
    scores = page.split('id="evals"')[1].split("</section>")[0]
    v1 = scores.split('data-column="v1">')[1].split("</td>")[0]
    v2 = scores.split('data-column="v2">')[1].split("</td>")[0]
    assert "50%" in v1 and "data-promoted>promoted" in v1 and f"{CRITERION} 50%" in v1
    assert "100%" in v2 and f"/runs/{v2_run}" in v2
    assert "0%" in scores.split('data-column="@prod">')[1].split("</td>")[0]

    other = await make_tenant()
    await sign_in(browser_client, (await make_user(other)).email, PASSWORD)
    assert (
        await browser_client.get(f"/console/evals/{eval_id}/runs/{gate_run}")
    ).status_code == 404
    assert eval_id not in (await browser_client.get("/console/evals/")).text
