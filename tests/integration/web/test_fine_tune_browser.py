"""The fine-tune page in a real browser (Debian's Chromium, Playwright, a real `loraplex api`
process without engines): the loss curve grows as the worker reports steps, without a
reload, and the finished job's adapter gets an alias from the page."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from playwright.async_api import Browser, Page, expect
from sqlalchemy import select

from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import (
    Adapter,
    AdapterVersion,
    BaseModel,
    DatasetFile,
    FineTuneJob,
    JobStatus,
)
from loraplex.finetune.ids import JOB, public
from loraplex.finetune.transitions import add_event, heartbeat, set_status
from loraplex.settings import Settings
from tests.conftest import Api
from tests.integration.web.conftest import needs_chromium, sign_in_page
from tests.support.adapter_api import adapter_with_versions
from tests.support.lora_files import TINY_BASE
from tests.support.screens import screenshot_both

pytestmark = needs_chromium
TOTAL_STEPS = 10
POINTS = "document.querySelector('#live polyline')?.getAttribute('points').trim().split(/ +/)"
WAIT_MS = 20_000  # the page polls every 2 s; a loaded machine may take a few polls


class Worker:
    """Writes a job's progress the way a training worker does: a heartbeat with the progress,
    and a `metrics` event per reported step."""

    def __init__(self, settings: Settings, job_id: UUID):
        self.config = sqlalchemy_config(settings)
        self.job_id = job_id

    async def step(self, step: int, loss: float) -> None:
        """Report one finished step."""
        progress = {
            "step": step,
            "total_steps": TOTAL_STEPS,
            "loss": loss,
            "learning_rate": 2e-4,
            "tokens_per_s": 1500.0,
            "eta_s": 2.0 * (TOTAL_STEPS - step),
        }
        await heartbeat(self.config.create_session_maker(), self.job_id, progress)
        async with self.config.get_session() as session:
            message = f"Step {step}/{TOTAL_STEPS}: training loss={loss:.4f}"
            await add_event(session, self.job_id, message, kind="metrics", data=progress)
            await session.commit()

    async def succeed(self, adapter: str, number: int) -> None:
        """Finish as the worker does once the adapter version is stored."""
        async with self.config.get_session() as session:
            version_id = await session.scalar(
                select(AdapterVersion.id)
                .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
                .where(Adapter.name == adapter, AdapterVersion.number == number)
            )
            assert await set_status(
                session,
                self.job_id,
                (JobStatus.RUNNING,),
                JobStatus.SUCCEEDED,
                fine_tuned_model=f"{adapter}@v{number}",
                adapter_version_id=version_id,
                finished_at=datetime.now(UTC),
            )
            await add_event(session, self.job_id, "The job has successfully completed")
            await session.commit()

    async def close(self) -> None:
        """Let go of the database connections."""
        await self.config.get_engine().dispose()


async def _running_job(settings: Settings, tenant_id: str, adapter: str, base: str) -> UUID:
    """A job a worker has claimed and started, with its training file."""
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        base_id = await session.scalar(select(BaseModel.id).where(BaseModel.name == base))
        data = DatasetFile(
            tenant_id=UUID(tenant_id), purpose="fine-tune", filename="support.jsonl", rows=120
        )
        session.add(data)
        await session.flush()
        job = FineTuneJob(
            tenant_id=UUID(tenant_id),
            base_model_id=base_id,
            model=base,
            suffix=adapter,
            training_file_id=data.id,
            hyperparameters={"n_epochs": 3, "learning_rate_multiplier": "auto", "lora_r": 8},
            status=JobStatus.RUNNING,
            started_at=datetime.now(UTC),
            attempts=1,
        )
        session.add(job)
        await session.commit()
    await config.get_engine().dispose()
    return job.id


async def _points(page: Page) -> int:
    return int(await page.evaluate(f"({POINTS} || []).length"))


async def test_a_tenant_admin_watches_a_running_fine_tunes_loss_curve_grow_in_chromium(
    browser: Browser,
    console_url: str,
    make_tenant,
    make_user,
    operator: Api,
    settings: Settings,
    tmp_path: Path,
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    job_id = await _running_job(settings, tenant.id, adapter, TINY_BASE.name)
    worker = Worker(settings, job_id)
    page: Any = await browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        for step, loss in ((1, 2.4), (2, 2.1)):
            await worker.step(step, loss)
        await sign_in_page(page, console_url, (await make_user(tenant)).email)
        await page.get_by_role("navigation").get_by_role("link", name="Fine-tunes").click()
        await page.click(f"a[href='/console/fine-tunes/{public(JOB, job_id)}']")
        await expect(page.locator("[data-status]")).to_have_text("running")
        await expect(page.locator("[data-hyperparameters]")).to_contain_text("LoRA rank (r)")
        assert await _points(page) == 2
        await page.evaluate("window.notReloaded = true")

        for step, loss in ((3, 1.8), (4, 1.5), (5, 1.3)):  # while the page is open
            await worker.step(step, loss)

        await page.wait_for_function(f"({POINTS} || []).length === 5", timeout=WAIT_MS)
        summary = page.locator("[data-loss-summary]")
        await expect(summary).to_contain_text("1.3000 at step 5 of 10", timeout=WAIT_MS)
        await expect(page.locator("[data-steps]")).to_contain_text("5 / 10")
        assert await page.evaluate("window.notReloaded === true")

        # It succeeds: polling stops, the result card offers an alias (typed, sent by Enter).
        await worker.succeed(adapter, 1)
        result = page.locator("#result")
        await expect(result).to_contain_text(f"{adapter}@v1", timeout=WAIT_MS)
        await expect(page.locator("[data-status]")).to_have_text("succeeded")
        alias = page.get_by_label("Alias", exact=True)
        await alias.fill("staging")
        await alias.press("Enter")
        await expect(result.locator("[data-aliases]")).to_contain_text(f"{adapter}@staging")
        pointed = await tenant.api.get(
            f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases/staging"
        )
        assert pointed.json()["version"] == 1
        await screenshot_both(page, "fine-tune")

        await page.click("text=← All fine-tunes")
        row = page.locator(f"tr[data-job='{public(JOB, job_id)}']")
        await expect(row.locator("[data-status]")).to_have_text("succeeded")
        await screenshot_both(page, "fine-tunes")
    finally:
        await page.close()
        await worker.close()
