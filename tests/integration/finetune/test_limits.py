"""Fine-tuning limits against the session's PostgreSQL and S3: plan limits on rank, steps and
checkpoint interval, storage counted across files and checkpoints, checkpoints pruned, the
concurrent-job limit under concurrent creates, and a suspended tenant's jobs cancelled. Every
refusal is a 403 naming its limit, counted by reason and written to the tenant's audit log."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.connections import open_object_store
from loraplex.control.adapters.versions import stored_bytes
from loraplex.db.models import FineTuneCheckpoint, FineTuneEvent, FineTuneJob, JobStatus
from loraplex.errors import Forbidden, QuotaExceeded
from loraplex.finetune.ids import JOB, public
from loraplex.finetune.schemas import JobCreate
from loraplex.finetune.service import JobService
from loraplex.finetune.transitions import heartbeat
from loraplex.settings import Settings
from loraplex.workers.training_run import TrainingRun
from tests.conftest import Api
from tests.support.adapter_api import ensure_tiny_base
from tests.support.no_queue import NoQueue

ROWS = [
    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(12)
]
DATA = "".join(json.dumps(row) + "\n" for row in ROWS).encode()


async def _upload(api: Api, data: bytes = DATA) -> Any:
    return await api.post(
        "/v1/files",
        files={"file": ("train.jsonl", data, "application/jsonl")},
        data={"purpose": "fine-tune"},
    )


async def _tenant(make_tenant: Any, operator: Api, plan: str, **overrides: int) -> Any:
    tenant = await make_tenant(plan=plan)
    if overrides:
        response = await operator.put(
            f"/api/v1/tenants/{tenant.id}/quota", json={"overrides": overrides}
        )
        assert response.status_code == 200, response.text
    return tenant


async def _create_job(api: Api, base: str, file_id: str, **hyper: Any) -> Any:
    body = {"model": base, "training_file": file_id, "hyperparameters": hyper}
    return await api.post("/v1/fine_tuning/jobs", json=body)


def _refusals(tenant_id: str, reason: str) -> float:
    labels = {"tenant": tenant_id, "reason": reason}
    return REGISTRY.get_sample_value("loraplex_tenant_limit_refusals_total", labels) or 0.0


async def _audited_refusals(tenant: Any) -> list[dict[str, Any]]:
    entries = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/audit")).json()["items"]
    return [e["details"] for e in entries if e["action"] == "tenant.limit_refused"]


@pytest.mark.parametrize(
    "plan, hyper, limit",
    [
        ("free", {"lora_r": 32}, "max_rank"),
        ("pro", {"checkpoint_every": 1}, "min_checkpoint_every"),
        ("free", {"n_epochs": 1000, "batch_size": 1}, "max_fine_tune_steps"),
    ],
)
async def test_a_job_over_a_plan_limit_is_refused_naming_it_counted_and_audited(
    make_tenant: Any, operator: Api, plan: str, hyper: dict[str, int], limit: str
) -> None:
    tenant = await _tenant(make_tenant, operator, plan)
    base = await ensure_tiny_base(operator)
    file_id = (await _upload(tenant.api)).json()["id"]
    before = _refusals(tenant.id, limit)

    response = await _create_job(tenant.api, base, file_id, **hyper)

    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded" and limit in error["message"]
    assert _refusals(tenant.id, limit) == before + 1
    assert [d["limit"] for d in await _audited_refusals(tenant)] == [limit]
    jobs = (await tenant.api.get("/v1/fine_tuning/jobs")).json()["data"]
    assert jobs == []


async def test_the_same_job_within_the_plan_is_accepted(
    make_tenant: Any, operator: Api, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await _tenant(make_tenant, operator, "free")
    base = await ensure_tiny_base(operator)
    file_id = (await _upload(tenant.api)).json()["id"]
    async with sessions() as session:
        data = JobCreate(model=base, training_file=file_id, suffix="fits")
        job = await JobService(session).create(UUID(tenant.id), data, "test", NoQueue())  # type: ignore[arg-type]
    assert job.status == JobStatus.VALIDATING_FILES


async def test_a_training_file_over_the_storage_quota_is_refused_and_not_stored(
    make_tenant: Any, operator: Api
) -> None:
    tenant = await _tenant(make_tenant, operator, "pro", max_storage_bytes=len(DATA) + 100)
    assert (await _upload(tenant.api)).status_code == 200

    refused = await _upload(tenant.api)

    assert refused.status_code == 403, refused.text
    message = refused.json()["error"]["message"]
    assert "max_storage_bytes" in message and f"{len(DATA)} used" in message
    assert len((await tenant.api.get("/v1/files")).json()["data"]) == 1
    assert [d["limit"] for d in await _audited_refusals(tenant)] == ["max_storage_bytes"]
    assert _refusals(tenant.id, "max_storage_bytes") >= 1


async def test_concurrent_creates_never_pass_the_concurrent_job_limit(
    make_tenant: Any, operator: Api, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await _tenant(make_tenant, operator, "pro", concurrent_fine_tunes=2)
    base = await ensure_tiny_base(operator)
    file_id = (await _upload(tenant.api)).json()["id"]

    async def create(index: int) -> str:
        async with sessions() as session:
            data = JobCreate(model=base, training_file=file_id, suffix=f"race-{index}")
            try:
                await JobService(session).create(UUID(tenant.id), data, "test", NoQueue())  # type: ignore[arg-type]
            except QuotaExceeded as exc:
                assert "concurrent_fine_tunes" in exc.detail
                return "refused"
            return "created"

    outcomes = await asyncio.gather(*(create(i) for i in range(8)))

    assert sorted(outcomes) == ["created"] * 2 + ["refused"] * 6
    async with sessions() as session:
        statuses = list(
            await session.scalars(
                select(FineTuneJob.status).where(FineTuneJob.tenant_id == UUID(tenant.id))
            )
        )
    assert statuses == [JobStatus.VALIDATING_FILES] * 2


async def test_suspending_a_tenant_cancels_its_queued_jobs_and_stops_its_running_ones(
    make_tenant: Any, operator: Api, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await _tenant(make_tenant, operator, "pro")
    base = await ensure_tiny_base(operator)
    file_id = (await _upload(tenant.api)).json()["id"]
    async with sessions() as session:
        jobs = JobService(session)
        queued = await jobs.create(
            UUID(tenant.id),
            JobCreate(model=base, training_file=file_id),
            "test",
            NoQueue(),  # type: ignore[arg-type]
        )
        running = await jobs.create(
            UUID(tenant.id),
            JobCreate(model=base, training_file=file_id),
            "test",
            NoQueue(),  # type: ignore[arg-type]
        )
        await session.execute(
            update(FineTuneJob).where(FineTuneJob.id == running.id).values(status=JobStatus.RUNNING)
        )
        await session.commit()

    assert (await operator.post(f"/api/v1/tenants/{tenant.id}/suspend")).status_code == 200

    async with sessions() as session:
        after = {
            j.id: j
            for j in await session.scalars(select(FineTuneJob))
            if j.tenant_id == UUID(tenant.id)
        }
        events = [
            e.message
            for e in await session.scalars(
                select(FineTuneEvent).where(FineTuneEvent.job_id == running.id)
            )
        ]
    assert after[queued.id].status == JobStatus.CANCELLED and after[queued.id].finished_at
    assert after[running.id].status == JobStatus.RUNNING and after[running.id].cancel_requested
    assert "Cancellation requested: the tenant was suspended" in events
    # What the running job's worker reads at its next heartbeat (every ~2 s): stop.
    assert await heartbeat(sessions, running.id, {}) is True
    audit = (await operator.get("/api/v1/audit", params={"pageSize": 50})).json()["items"]
    cancels = [
        e for e in audit if e["action"] == "fine_tune_job.cancel" and e["tenant_id"] == tenant.id
    ]
    assert {e["details"]["reason"] for e in cancels} == {"the tenant was suspended"}
    assert len(cancels) == 2


async def test_a_job_cannot_be_created_for_a_suspended_tenant(
    make_tenant: Any, operator: Api, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await _tenant(make_tenant, operator, "pro")
    base = await ensure_tiny_base(operator)
    file_id = (await _upload(tenant.api)).json()["id"]
    await operator.post(f"/api/v1/tenants/{tenant.id}/suspend")
    async with sessions() as session:
        data = JobCreate(model=base, training_file=file_id)
        with pytest.raises(Forbidden, match="suspended"):
            await JobService(session).create(UUID(tenant.id), data, "test", NoQueue())  # type: ignore[arg-type]


async def test_a_workers_checkpoints_are_pruned_to_the_last_three_and_count_against_storage(
    make_tenant: Any,
    operator: Api,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> None:
    tenant = await _tenant(make_tenant, operator, "pro")
    base = await ensure_tiny_base(operator)
    file_id = (await _upload(tenant.api)).json()["id"]
    async with sessions() as session:
        data = JobCreate(model=base, training_file=file_id)
        job = await JobService(session).create(UUID(tenant.id), data, "test", NoQueue())  # type: ignore[arg-type]
    store = open_object_store(settings)
    run = TrainingRun(job.id, replace(settings, job_checkpoints_kept=3), sessions, store)
    run._loop = asyncio.get_running_loop()  # what `run()` sets before training starts
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * 1000)

    for step in (10, 20, 30, 40, 50):  # as the trainer's thread calls it
        await asyncio.to_thread(run._on_checkpoint, folder, step)

    async with sessions() as session:
        steps = list(
            await session.scalars(
                select(FineTuneCheckpoint.step)
                .where(FineTuneCheckpoint.job_id == job.id)
                .order_by(FineTuneCheckpoint.step)
            )
        )
        used = await stored_bytes(session, UUID(tenant.id))
    assert steps == [30, 40, 50]
    kept = {key.split("/")[2] for key in store.list_keys(f"checkpoints/{job.id}/")}
    assert kept == {"00000030", "00000040", "00000050"}
    assert used == len(DATA) + 3 * 1000
    listed = (
        await tenant.api.get(f"/v1/fine_tuning/jobs/{public(JOB, job.id)}/checkpoints")
    ).json()
    assert [c["step_number"] for c in listed["data"]] == [50, 40, 30]

    # A tenant whose storage is full keeps training but stores no more checkpoints.
    await operator.put(
        f"/api/v1/tenants/{tenant.id}/quota", json={"overrides": {"max_storage_bytes": used + 10}}
    )
    await asyncio.to_thread(run._on_checkpoint, folder, 60)

    assert not store.list_keys(f"checkpoints/{job.id}/00000060/")
    async with sessions() as session:
        last = await session.scalar(
            select(FineTuneEvent.message)
            .where(FineTuneEvent.job_id == job.id)
            .order_by(FineTuneEvent.created_at.desc())
            .limit(1)
        )
        steps_after = list(
            await session.scalars(
                select(FineTuneCheckpoint.step).where(FineTuneCheckpoint.job_id == job.id)
            )
        )
    assert last is not None and last.startswith("Checkpoint at step 60 not saved")
    assert sorted(steps_after) == [30, 40, 50]
    assert [d["limit"] for d in await _audited_refusals(tenant)] == ["max_storage_bytes"]
