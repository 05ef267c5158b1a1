"""Fine-tuning in the console: upload a training file, start a job, watch its loss live."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy import select

from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import (
    Adapter,
    AdapterVersion,
    BaseModel,
    DatasetFile,
    FineTuneCheckpoint,
    FineTuneJob,
    JobStatus,
)
from loraplex.finetune.ids import JOB, parse, public
from loraplex.finetune.transitions import add_event
from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, htmx, sign_in
from tests.support.adapter_api import adapter_with_versions, ensure_tiny_base

ROWS = [
    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(12)
]


async def _job_row(settings, operator: Api, tenant_id: str, **fields: Any) -> str:
    """A job of the tenant on the tiny base, written to the database as the workers leave
    it; returns its public id."""
    name = await ensure_tiny_base(operator)
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        base_id = await session.scalar(select(BaseModel.id).where(BaseModel.name == name))
        job = FineTuneJob(tenant_id=UUID(tenant_id), base_model_id=base_id, model=name, **fields)
        session.add(job)
        await session.commit()
    await config.get_engine().dispose()
    return public(JOB, job.id)


async def _version_id(settings, adapter: str, number: int) -> UUID:
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        version_id = await session.scalar(
            select(AdapterVersion.id)
            .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
            .where(Adapter.name == adapter, AdapterVersion.number == number)
        )
    await config.get_engine().dispose()
    assert version_id is not None
    return version_id


async def _succeeded_job(settings, operator: Api, tenant_id: str, adapter: str) -> str:
    """A succeeded job of the tenant that made `adapter`'s v1, as the worker leaves it."""
    return await _job_row(
        settings,
        operator,
        tenant_id,
        suffix=adapter,
        status=JobStatus.SUCCEEDED,
        fine_tuned_model=f"{adapter}@v1",
        adapter_version_id=await _version_id(settings, adapter, 1),
    )


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
    page = f"/console/fine-tunes/{public(JOB, job.id)}"
    response = await browser_client.get(page)
    live = await browser_client.get(f"{page}/live", headers={"hx-request": "true"})
    alias = await browser_client.post(
        f"{page}/alias", data={"alias": "prod"}, headers=htmx(browser_client)
    )
    assert response.status_code == 404 and "theirs" not in response.text
    assert (live.status_code, alias.status_code) == (404, 404)


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


async def test_the_job_page_shows_its_hyperparameters_file_times_and_checkpoints(
    browser_client, make_tenant, make_user, operator: Api, settings
) -> None:
    tenant = await _signed_in(browser_client, make_tenant, make_user)
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        data_file = DatasetFile(
            tenant_id=UUID(tenant.id), purpose="fine-tune", filename="support.jsonl", rows=12
        )
        session.add(data_file)
        await session.commit()
    started = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    hyper = {"n_epochs": 4, "batch_size": "auto", "learning_rate_multiplier": 2.5, "lora_r": 8}
    job_id = await _job_row(
        settings,
        operator,
        tenant.id,
        suffix="support",
        training_file_id=data_file.id,
        hyperparameters={**hyper, "lora_alpha": 32.0, "lora_dropout": 0.1},
        status=JobStatus.FAILED,
        started_at=started,
        finished_at=started + timedelta(minutes=3, seconds=7),
    )
    async with config.get_session() as session:
        saved = {"loss": 0.75, "files": {"adapter_model.safetensors": "0" * 64}}
        session.add(
            FineTuneCheckpoint(
                job_id=parse(JOB, job_id, "job"), step=20, storage_key="k/", metrics=saved
            )
        )
        await session.commit()
    await config.get_engine().dispose()

    page = (await browser_client.get(f"/console/fine-tunes/{job_id}")).text

    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", page))
    assert (facts["Epochs"], facts["Batch size"], facts["Learning rate multiplier"]) == (
        "4",
        "auto (8)",
        "2.5",
    )
    assert (facts["LoRA rank (r)"], facts["LoRA alpha"], facts["LoRA dropout"]) == (
        "8",
        "32",
        "0.1",
    )
    assert "support.jsonl · 12 rows" in page
    assert "2025-01-02 03:04:05 UTC" in page and "3 min 07 s" in page
    assert 'data-checkpoint="20"' in page and "0.7500" in page


async def test_point_alias_on_a_succeeded_jobs_page_points_it_at_the_jobs_version(
    browser_client, make_tenant, make_user, operator: Api, settings, tmp_path: Path
) -> None:
    tenant = await _signed_in(browser_client, make_tenant, make_user)
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    assert (await tenant.api.put(f"{aliases}/prod", json={"version": 2})).status_code == 200
    job_id = await _succeeded_job(settings, operator, tenant.id, adapter)
    page = (await browser_client.get(f"/console/fine-tunes/{job_id}")).text
    assert f'href="/console/adapters/{adapter}"' in page
    assert f'href="/console/playground?model={adapter}%40v1"' in page

    pointed = await browser_client.post(
        f"/console/fine-tunes/{job_id}/alias", data={"alias": "prod"}, headers=htmx(browser_client)
    )

    assert pointed.status_code == 200, pointed.text
    assert f"<code>{adapter}@prod</code> now points at v1" in pointed.text
    prod = (await tenant.api.get(f"{aliases}/prod")).json()
    assert (prod["version"], prod["previous_version"]) == (1, 2)


async def test_a_bad_alias_name_on_the_job_page_is_a_400_that_says_why(
    browser_client, make_tenant, make_user, operator: Api, settings, tmp_path: Path
) -> None:
    tenant = await _signed_in(browser_client, make_tenant, make_user)
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    job_id = await _succeeded_job(settings, operator, tenant.id, adapter)

    refused = await browser_client.post(
        f"/console/fine-tunes/{job_id}/alias", data={"alias": "Bad!"}, headers=htmx(browser_client)
    )

    assert refused.status_code == 400 and "must start with a-z" in refused.text
    assert refused.headers["hx-retarget"] == "#flash"  # shown on the page, not as a new page


async def test_point_alias_with_the_name_left_empty_points_prod(
    browser_client, make_tenant, make_user, operator: Api, settings, tmp_path: Path
) -> None:
    tenant = await _signed_in(browser_client, make_tenant, make_user)
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    job_id = await _succeeded_job(settings, operator, tenant.id, adapter)

    pointed = await browser_client.post(
        f"/console/fine-tunes/{job_id}/alias", data={"alias": " "}, headers=htmx(browser_client)
    )

    assert pointed.status_code == 200, pointed.text
    assert f"<code>{adapter}@prod</code> now points at v1" in pointed.text
    prod = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases/prod")
    assert prod.json()["version"] == 1


async def test_a_tenant_member_may_not_point_an_alias_from_the_job_page(
    browser_client, make_tenant, make_user, operator: Api, settings, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    member = await make_user(tenant, role="tenant_member")
    await sign_in(browser_client, member.email, PASSWORD)
    job_id = await _succeeded_job(settings, operator, tenant.id, adapter)

    refused = await browser_client.post(
        f"/console/fine-tunes/{job_id}/alias", data={"alias": "prod"}, headers=htmx(browser_client)
    )

    assert refused.status_code == 403
    aliases = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases")
    assert "prod" not in aliases.text
