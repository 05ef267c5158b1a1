"""Fine-tuning in the console: upload a training file, start a job, watch its loss live."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sqlalchemy import select

from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import BaseModel, FineTuneJob, JobStatus
from loraplex.finetune.ids import JOB, public
from loraplex.finetune.jobs import add_event
from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, htmx, sign_in
from tests.support.adapter_api import ensure_tiny_base

ROWS = [
    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(12)
]


async def _signed_in(browser_client, make_tenant, make_user) -> Any:
    tenant = await make_tenant()
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    return tenant


async def test_a_file_uploaded_and_a_job_started_in_the_console_are_the_apis_too(
    browser_client, make_tenant, make_user, operator: Api, operator_user, tmp_path: Path
) -> None:
    tenant = await _signed_in(browser_client, make_tenant, make_user)
    base = await ensure_tiny_base(operator)
    data = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
    uploaded = await browser_client.post(
        "/console/fine-tunes/files",
        files={"file": ("support.jsonl", data, "application/jsonl")},
        headers=htmx(browser_client),
    )
    assert uploaded.status_code == 201, uploaded.text
    files = (await tenant.api.get("/v1/files")).json()["data"]
    assert [f["filename"] for f in files] == ["support.jsonl"]
    page = (await browser_client.get("/console/fine-tunes/")).text
    assert "support.jsonl (12 rows, supervised)" in page

    started = await browser_client.post(
        "/console/fine-tunes/",
        data={"model": base, "training_file": files[0]["id"], "suffix": "support", "n_epochs": "2"},
        headers=htmx(browser_client),
    )
    assert started.status_code == 201, started.text
    job_id = started.headers["hx-redirect"].rsplit("/", 1)[1]
    job = (await tenant.api.get(f"/v1/fine_tuning/jobs/{job_id}")).json()
    assert (job["model"], job["suffix"], job["hyperparameters"]["n_epochs"]) == (base, "support", 2)

    await sign_in(browser_client, operator_user.email, operator_user.password)
    listed = (await browser_client.get("/admin/jobs")).text  # operators see every tenant's
    assert f'data-job="{job_id}"' in listed and tenant.slug in listed


async def test_bad_fine_tune_forms_get_a_400_that_names_the_problem(
    browser_client, make_tenant, make_user
) -> None:
    await _signed_in(browser_client, make_tenant, make_user)
    not_jsonl = await browser_client.post(
        "/console/fine-tunes/files",
        files={"file": ("notes.jsonl", b"this is not json\n", "application/jsonl")},
        headers=htmx(browser_client),
    )
    bad_suffix = await browser_client.post(
        "/console/fine-tunes/",
        data={"model": "x", "training_file": "file-x", "suffix": "Bad Suffix"},
        headers=htmx(browser_client),
    )
    bad_epochs = await browser_client.post(
        "/console/fine-tunes/",
        data={"model": "x", "training_file": "file-x", "n_epochs": "two"},
        headers=htmx(browser_client),
    )
    assert not_jsonl.status_code == 400 and "line 1" in not_jsonl.text.lower()
    assert bad_suffix.status_code == 400 and "suffix" in bad_suffix.text
    assert bad_epochs.status_code == 400 and "n_epochs" in bad_epochs.text


async def test_a_running_job_polls_and_draws_its_loss_and_a_finished_one_stops_polling(
    browser_client, make_tenant, make_user, operator: Api, settings
) -> None:
    tenant = await _signed_in(browser_client, make_tenant, make_user)
    name = await ensure_tiny_base(operator)
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        base_id = await session.scalar(select(BaseModel.id).where(BaseModel.name == name))
        job = FineTuneJob(
            tenant_id=tenant.id,
            base_model_id=base_id,
            model=name,
            suffix="live",
            status=JobStatus.RUNNING,
            progress={"step": 3, "total_steps": 10, "loss": 1.5, "eta_s": 42},
        )
        session.add(job)
        await session.flush()
        for step, loss in ((1, 2.5), (2, 2.0), (3, 1.5)):  # as the worker reports steps
            await add_event(
                session, job.id, f"Step {step}", kind="metrics", data={"step": step, "loss": loss}
            )
        await session.commit()
        live_url = f"/console/fine-tunes/{public(JOB, job.id)}/live"

        running = (await browser_client.get(live_url, headers={"hx-request": "true"})).text
        assert 'hx-trigger="every 2s"' in running
        assert len(re.search(r'<polyline points="([^"]+)"', running)[1].split()) == 3
        assert "loss 1.5000 (from 2.5000)" in running and "3 / 10" in running

        job.status = JobStatus.SUCCEEDED
        await session.merge(job)
        await session.commit()
    await config.get_engine().dispose()
    finished = (await browser_client.get(live_url, headers={"hx-request": "true"})).text
    assert "hx-trigger" not in finished and "succeeded" in finished


async def test_another_tenants_job_does_not_exist_in_the_console(
    browser_client, make_tenant, make_user, operator: Api, settings
) -> None:
    owner = await make_tenant()
    name = await ensure_tiny_base(operator)
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        base_id = await session.scalar(select(BaseModel.id).where(BaseModel.name == name))
        job = FineTuneJob(tenant_id=owner.id, base_model_id=base_id, model=name, suffix="theirs")
        session.add(job)
        await session.commit()
    await config.get_engine().dispose()
    await _signed_in(browser_client, make_tenant, make_user)
    response = await browser_client.get(f"/console/fine-tunes/{public(JOB, job.id)}")
    assert response.status_code == 404 and "theirs" not in response.text


async def test_a_training_file_is_deleted_from_the_console_unless_a_job_uses_it(
    browser_client, make_tenant, make_user, operator: Api
) -> None:
    tenant = await _signed_in(browser_client, make_tenant, make_user)
    base = await ensure_tiny_base(operator)
    data = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
    for name in ("used.jsonl", "spare.jsonl"):
        await browser_client.post(
            "/console/fine-tunes/files",
            files={"file": (name, data, "application/jsonl")},
            headers=htmx(browser_client),
        )
    ids = {f["filename"]: f["id"] for f in (await tenant.api.get("/v1/files")).json()["data"]}
    await browser_client.post(
        "/console/fine-tunes/",
        data={"model": base, "training_file": ids["used.jsonl"]},
        headers=htmx(browser_client),
    )

    busy = await browser_client.post(
        f"/console/fine-tunes/files/{ids['used.jsonl']}/delete", headers=htmx(browser_client)
    )
    spare = await browser_client.post(
        f"/console/fine-tunes/files/{ids['spare.jsonl']}/delete", headers=htmx(browser_client)
    )

    assert busy.status_code == 409 and "used by a running fine-tuning job" in busy.text
    assert spare.status_code == 200
    left = [f["filename"] for f in (await tenant.api.get("/v1/files")).json()["data"]]
    assert left == ["used.jsonl"]
