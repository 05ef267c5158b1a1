"""The fine-tuning tasks as a worker runs them (eagerly, without a broker), against the
session's PostgreSQL and S3: a created job is committed before its validation is sent, a
validated job is sent to `train` through the app the task ran in, and a task that keeps
failing is retried and then fails its job with an event."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select

from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import BaseModel, DatasetFile, FineTuneEvent, FineTuneJob, JobStatus
from loraplex.errors import Unavailable
from loraplex.finetune.queue import JobQueue, Queue, TaskName
from loraplex.finetune.schemas import JobCreate
from loraplex.finetune.service import JobService
from loraplex.settings import Settings
from loraplex.workers import process
from loraplex.workers.celery_app import make_celery
from tests.conftest import Api
from tests.support.adapter_api import ensure_tiny_base, upload_training_file

ROWS = [
    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(12)
]


class Sent:
    """Stands in for the app's `send_task`, noting each task and whether its job was
    already committed (read back through a separate connection) when it was sent."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.calls: list[tuple[str, list[str], str, JobStatus | None]] = []

    def __call__(self, name: str, args: list[str], queue: str, **_: Any) -> None:
        self.calls.append((name, args, queue, _committed_status(self.settings, UUID(args[0]))))


def _committed_status(settings: Settings, job_id: UUID) -> JobStatus | None:
    async def read() -> JobStatus | None:
        config = sqlalchemy_config(settings)
        try:
            async with config.get_session() as session:
                return await session.scalar(
                    select(FineTuneJob.status).where(FineTuneJob.id == job_id)
                )
        finally:
            await config.get_engine().dispose()

    # send_task is called from code running on an event loop: read on a thread of its own.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, read()).result()


@pytest.fixture
def celery_app(settings: Settings) -> Iterator[tuple[Any, Sent]]:
    """The worker's Celery app, running tasks in this process, its sends recorded."""
    app = make_celery(settings)
    app.conf.task_always_eager = True
    sent = Sent(settings)
    app.send_task = sent  # type: ignore[method-assign]
    yield app, sent
    process.close_worker_process()


async def _tenant_with_file(make_tenant: Any, operator: Api) -> tuple[Any, str, str]:
    tenant = await make_tenant()
    base = await ensure_tiny_base(operator)
    return tenant, base, await upload_training_file(tenant.api, ROWS)


async def _create(settings: Settings, tenant: Any, base: str, file_id: str, app: Any) -> UUID:
    config = sqlalchemy_config(settings)
    try:
        async with config.get_session() as session:
            data = JobCreate(model=base, training_file=file_id, suffix="ft-tasks")
            job = await JobService(session).create(UUID(tenant.id), data, "test", JobQueue(app))
    finally:
        await config.get_engine().dispose()
    return job.id


async def _run(app: Any, task: TaskName, job_id: UUID) -> Any:
    # The task runs its own event loop (as in a worker process), so not on the test's.
    return await asyncio.to_thread(app.tasks[task.value].apply, args=[str(job_id)])


async def _job(settings: Settings, job_id: UUID) -> tuple[FineTuneJob, list[FineTuneEvent]]:
    config = sqlalchemy_config(settings)
    try:
        async with config.get_session() as session:
            job = await session.get_one(FineTuneJob, job_id)
            events = await session.scalars(
                select(FineTuneEvent)
                .where(FineTuneEvent.job_id == job_id)
                .order_by(FineTuneEvent.id)
            )
            return job, list(events)
    finally:
        await config.get_engine().dispose()


async def test_a_created_job_is_committed_then_validated_then_sent_to_train_through_one_app(
    settings: Settings, make_tenant: Any, operator: Api, celery_app: tuple[Any, Sent]
) -> None:
    app, sent = celery_app
    tenant, base, file_id = await _tenant_with_file(make_tenant, operator)
    job_id = await _create(settings, tenant, base, file_id, app)
    assert sent.calls == [
        (TaskName.VALIDATE, [str(job_id)], Queue.DEFAULT, JobStatus.VALIDATING_FILES)
    ]

    result = await _run(app, TaskName.VALIDATE, job_id)
    assert result.successful(), result.traceback
    job, events = await _job(settings, job_id)
    assert job.status == JobStatus.QUEUED
    assert [e.message for e in events][-1] == "Files validated; job queued"
    assert sent.calls[1] == (TaskName.TRAIN, [str(job_id)], Queue.TRAIN, JobStatus.QUEUED)

    engine = process.worker_process(settings).config.get_engine()
    # A duplicate delivery (or a retry after the train send failed) sends `train` again;
    # training itself starts once, by compare-and-set on the job's status.
    again = await _run(app, TaskName.VALIDATE, job_id)
    assert again.successful() and [c[0] for c in sent.calls[1:]] == [TaskName.TRAIN] * 2
    assert process.worker_process(settings).config.get_engine() is engine


async def test_a_job_whose_validation_cannot_be_queued_is_failed_and_the_caller_told(
    settings: Settings, make_tenant: Any, operator: Api, celery_app: tuple[Any, Sent]
) -> None:
    app, _ = celery_app

    def broker_down(*_: Any, **__: Any) -> None:
        raise ConnectionError("broker refused")

    app.send_task = broker_down  # type: ignore[method-assign]
    tenant, base, file_id = await _tenant_with_file(make_tenant, operator)
    config = sqlalchemy_config(settings)
    try:
        async with config.get_session() as session:
            data = JobCreate(model=base, training_file=file_id, suffix="ft-tasks")
            with pytest.raises(Unavailable):
                await JobService(session).create(UUID(tenant.id), data, "test", JobQueue(app))
            job_id = await session.scalar(
                select(FineTuneJob.id).where(FineTuneJob.tenant_id == UUID(tenant.id))
            )
    finally:
        await config.get_engine().dispose()
    assert job_id is not None
    job, events = await _job(settings, job_id)
    assert (job.status, job.error["code"]) == (JobStatus.FAILED, "queue_unavailable")
    assert events[-1].level == "error"


async def test_a_validation_that_keeps_failing_is_retried_then_fails_the_job_with_an_event(
    settings: Settings, make_tenant: Any, operator: Api, celery_app: tuple[Any, Sent]
) -> None:
    app, sent = celery_app
    tenant = await make_tenant()
    base = await ensure_tiny_base(operator)
    job_id = await _job_whose_file_is_gone(settings, UUID(tenant.id), base)
    labels = {"task": TaskName.VALIDATE.value, "outcome": "retried"}
    retried_before = REGISTRY.get_sample_value("loraplex_worker_task_runs_total", labels) or 0

    result = await _run(app, TaskName.VALIDATE, job_id)

    assert result.failed()
    retried = REGISTRY.get_sample_value("loraplex_worker_task_runs_total", labels)
    assert retried == retried_before + 3
    job, events = await _job(settings, job_id)
    assert job.status == JobStatus.FAILED and job.finished_at is not None
    assert job.error["code"] == "validation_error"
    assert events[-1].level == "error"
    assert events[-1].message.startswith("Validation could not run: ")
    assert sent.calls == []  # nothing was queued for training


async def _job_whose_file_is_gone(settings: Settings, tenant_id: UUID, base: str) -> UUID:
    """A new job whose training file's object is missing from the store."""
    config = sqlalchemy_config(settings)
    try:
        async with config.get_session() as session:
            base_id = await session.scalar(select(BaseModel.id).where(BaseModel.name == base))
            row = DatasetFile(
                tenant_id=tenant_id,
                purpose="fine-tune",
                filename="gone.jsonl",
                rows=12,
                bytes=100,
                storage_key=f"files/gone-{tenant_id}",
                sha256="0" * 64,
            )
            session.add(row)
            await session.flush()
            job = FineTuneJob(
                tenant_id=tenant_id,
                base_model_id=base_id,
                model=base,
                suffix="ft-gone",
                training_file_id=row.id,
                hyperparameters={},
                status=JobStatus.VALIDATING_FILES,
            )
            session.add(job)
            await session.commit()
            return job.id
    finally:
        await config.get_engine().dispose()
