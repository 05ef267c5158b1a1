"""Every console and admin page, checked by axe-core (from npm) in Debian's Chromium: no
serious or critical accessibility violation. The same walk writes each page's screenshots at
laptop and phone width when `LORAPLEX_SCREENSHOTS` names a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page
from sqlalchemy import select

from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import BaseModel, FineTuneJob, JobStatus
from loraplex.finetune.ids import JOB, public
from loraplex.finetune.transitions import add_event
from tests.conftest import Api
from tests.integration.web.conftest import needs_chromium, sign_in_page
from tests.support.adapter_api import adapter_with_versions
from tests.support.eval_rows import graded_run, make_eval
from tests.support.lora_files import TINY_BASE
from tests.support.screens import screenshot_both

pytestmark = needs_chromium
AXE = Path(__file__).parents[3] / "web" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = {"serious", "critical"}


async def _violations(page: Page) -> list[str]:
    """axe-core's serious and critical violations on the page, one line each."""
    await page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = await page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes'][:3]]}"
        for v in found
        if v["impact"] in BLOCKING
    ]


def _shot_name(path: str) -> str:
    """`/console/adapters/a-1f2e` -> `console-adapters-one`: pages of one object by their kind."""
    parts = path.strip("/").split("/")
    if len(parts) >= 3:  # /console/adapters/<name>, /console/fine-tunes/<id>, /admin/tenants/<id>
        parts[2] = "one"
    if len(parts) == 5:  # /console/evals/<id>/runs/<id>
        parts[4] = "one"
    return "-".join(parts)


async def _walk(page: Page, url: str, paths: list[str]) -> dict[str, list[str]]:
    """Open each path, check it with axe, screenshot it; {path: violations} where any."""
    failures = {}
    for path in paths:
        response = await page.goto(url + path)
        if response is None or not response.ok:
            failures[path] = [f"HTTP {response and response.status}"]
            continue
        await page.wait_for_load_state("networkidle")
        if problems := await _violations(page):
            failures[path] = problems
        await screenshot_both(page, _shot_name(path))
    return failures


async def _running_job(settings: Any, tenant_id: Any, base: str) -> str:
    """A fine-tune of the tenant with a few reported steps, as the worker writes them."""
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        base_id = await session.scalar(select(BaseModel.id).where(BaseModel.name == base))
        job = FineTuneJob(
            tenant_id=tenant_id,
            base_model_id=base_id,
            model=base,
            suffix="a11y",
            status=JobStatus.RUNNING,
            progress={"step": 3, "total_steps": 10, "loss": 1.5, "eta_s": 42},
        )
        session.add(job)
        await session.flush()
        for step, loss in ((1, 2.5), (2, 2.0), (3, 1.5)):
            await add_event(
                session, job.id, f"Step {step}", kind="metrics", data={"step": step, "loss": loss}
            )
        await session.commit()
        job_id = public(JOB, job.id)
    await config.get_engine().dispose()
    return job_id


async def test_every_console_and_admin_page_has_no_serious_accessibility_violation(
    browser: Browser,
    console_url: str,
    make_tenant,
    make_user,
    operator: Api,
    operator_user,
    settings,
    tmp_path: Path,
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    assert (await tenant.api.put(f"{aliases}/prod", json={"version": 1})).status_code == 200
    job = await _running_job(settings, tenant.id, TINY_BASE.name)
    eval_id = await make_eval(tenant)
    answers = [("Capital of France?", "Paris", True), ("Capital of Peru?", "Quito", False)]
    run = await graded_run(
        settings, tenant, eval_id, f"{adapter}@v1", answers, gate_version=(adapter, 1)
    )
    user = await make_user(tenant)
    page = await browser.new_page()

    await page.goto(f"{console_url}/login")
    failures = await _walk(page, console_url, ["/login"])
    await sign_in_page(page, console_url, user.email)
    console = [
        "/console/",
        "/console/keys",
        "/console/users",
        "/console/adapters",
        f"/console/adapters/{adapter}",
        "/console/fine-tunes/",
        f"/console/fine-tunes/{job}",
        "/console/evals/",
        f"/console/evals/{eval_id}/runs/{run}",
        "/console/playground",
        "/console/spend",
        "/console/audit",
        "/account/",
    ]
    failures |= await _walk(page, console_url, console)

    await page.context.clear_cookies()
    await sign_in_page(page, console_url, operator_user.email)
    admin = [
        "/admin/",
        "/admin/tenants",
        f"/admin/tenants/{tenant.id}",
        "/admin/audit",
        "/admin/adapters",
        "/admin/engines/",
        "/admin/plans/",
        "/admin/jobs",
    ]
    failures |= await _walk(page, console_url, admin)
    assert not failures, "\n".join(f"{p}: {v}" for p, vs in failures.items() for v in vs)


async def test_the_check_catches_an_unlabelled_control(browser: Browser) -> None:
    """The walk above can fail: axe flags a form field without a label as critical."""
    page = await browser.new_page()
    await page.set_content('<html lang="en"><title>t</title><main><input name="q"></main></html>')
    assert any(line.startswith("label (critical)") for line in await _violations(page))
