"""What the fine-tuning tasks do, with the database and the object store.

`validate` moves a job from `validating_files` to `queued` (or `failed` with the bad lines),
`train` from `queued` to `running` to `succeeded` | `failed` | `cancelled`, and `reap`
requeues jobs whose worker went silent. Training runs in a thread; its callbacks hop back
onto this event loop for database writes, throttled so progress costs little.
"""

from __future__ import annotations

import logging
import socket
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.api.deps import open_object_store
from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import BaseModel, DatasetFile, FineTuneCheckpoint, FineTuneJob, JobStatus
from loraplex.finetune.datasets import DatasetRejected, validate_jsonl
from loraplex.finetune.files import CHUNK, MAX_ROWS
from loraplex.finetune.jobs import add_event, set_status
from loraplex.finetune.queue import JobQueue
from loraplex.settings import Settings

log = logging.getLogger("loraplex.workers")


def _sessions(settings: Settings) -> tuple[Any, async_sessionmaker[AsyncSession]]:
    config = sqlalchemy_config(settings)
    return config, config.create_session_maker()


async def validate(job_id: UUID, settings: Settings) -> None:
    """Validate the job's files row by row against the base model's context; queue or fail it."""
    config, sessions = _sessions(settings)
    store = open_object_store(settings)
    try:
        async with sessions() as session:
            job = await session.get(FineTuneJob, job_id)
            if job is None or job.status != JobStatus.VALIDATING_FILES:
                return  # cancelled, or a duplicate delivery
            base = await session.get_one(BaseModel, job.base_model_id)
            files = [
                await session.get_one(DatasetFile, f)
                for f in (job.training_file_id, job.validation_file_id)
                if f
            ]
            problem = await anyio.to_thread.run_sync(_check_files, files, job.method, base, store)
            if problem:
                if await set_status(
                    session,
                    job_id,
                    (JobStatus.VALIDATING_FILES,),
                    JobStatus.FAILED,
                    error={
                        "code": "invalid_training_file",
                        "message": problem,
                        "param": "training_file",
                    },
                    finished_at=datetime.now(UTC),
                ):
                    await add_event(session, job_id, f"Validation failed: {problem}", level="error")
            elif await set_status(session, job_id, (JobStatus.VALIDATING_FILES,), JobStatus.QUEUED):
                await add_event(session, job_id, "Files validated; job queued")
                await session.commit()
                _queue(settings).train(job_id)
            await session.commit()
    finally:
        await config.get_engine().dispose()


def _check_files(files: list[DatasetFile], method: str, base: BaseModel, store: Any) -> str | None:
    counter = _token_counter(Path(base.source))
    for row in files:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "data.jsonl"
            store.get_file(row.storage_key, path, row.sha256)
            try:
                validate_jsonl(
                    _chunks(path),
                    purpose_method=method,
                    max_rows=MAX_ROWS,
                    max_bytes=row.bytes + 1,  # type: ignore[arg-type]
                    max_tokens_per_row=base.max_context if counter else None,
                    count_tokens=counter,
                )
            except DatasetRejected as exc:
                lines = "; ".join(str(e) for e in exc.errors[:20])
                return f"{row.filename}: {exc}" + (f" ({lines})" if lines else "")
    return None


def _chunks(path: Path) -> Any:
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            yield block


def _token_counter(model_dir: Path) -> Any:
    if not (model_dir / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer

    from loraplex.workers.trainer.examples import chat_token_counter

    return chat_token_counter(AutoTokenizer.from_pretrained(model_dir))


def _queue(settings: Settings) -> JobQueue:
    from loraplex.workers.celery_app import make_celery

    return JobQueue(make_celery(settings))


async def train(job_id: UUID, settings: Settings) -> None:
    """Run a queued job to its end; a duplicate or a job not queued is left alone."""
    config, sessions = _sessions(settings)
    try:
        async with sessions() as session:
            now = datetime.now(UTC)
            claimed = await set_status(
                session,
                job_id,
                (JobStatus.QUEUED,),
                JobStatus.RUNNING,
                started_at=now,
                heartbeat_at=now,
                worker=socket.gethostname(),
                attempts=FineTuneJob.attempts + 1,
            )
            await session.commit()
        if claimed:
            from loraplex.workers.training import TrainingRun

            await TrainingRun(job_id, settings, sessions).run()
    finally:
        await config.get_engine().dispose()


async def reap(settings: Settings, now: datetime | None = None) -> int:
    """Requeue (or fail, after too many tries) running jobs whose heartbeat stopped."""
    config, sessions = _sessions(settings)
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=settings.job_heartbeat_timeout_s)
    requeued = 0
    try:
        async with sessions() as session:
            stuck = (
                (
                    await session.execute(
                        select(FineTuneJob).where(
                            FineTuneJob.status == JobStatus.RUNNING,
                            FineTuneJob.heartbeat_at < cutoff,
                        )
                    )
                )
                .scalars()
                .all()
            )
            for job in stuck:
                if job.attempts >= settings.job_max_attempts:
                    if await set_status(
                        session,
                        job.id,
                        (JobStatus.RUNNING,),
                        JobStatus.FAILED,
                        finished_at=datetime.now(UTC),
                        error={
                            "code": "worker_lost",
                            "param": None,
                            "message": f"the worker stopped {job.attempts} times",
                        },
                    ):
                        await add_event(
                            session, job.id, "Worker lost too many times; job failed", level="error"
                        )
                elif await set_status(session, job.id, (JobStatus.RUNNING,), JobStatus.QUEUED):
                    step = await session.scalar(
                        select(FineTuneCheckpoint.step)
                        .where(FineTuneCheckpoint.job_id == job.id)
                        .order_by(FineTuneCheckpoint.step.desc())
                        .limit(1)
                    )
                    await add_event(
                        session,
                        job.id,
                        f"Worker lost; requeued from checkpoint step {step or 0}",
                        level="warn",
                    )
                    requeued += 1
                    await session.commit()
                    _queue(settings).train(job.id)
            await session.commit()
    finally:
        await config.get_engine().dispose()
    return requeued


async def reap_adapter_objects(settings: Settings) -> None:
    """The adapter store reaper, on the beat schedule."""
    from loraplex.control.adapters.reaper import reap as reap_objects

    config, sessions = _sessions(settings)
    try:
        async with sessions() as session:
            await reap_objects(session, open_object_store(settings))
    finally:
        await config.get_engine().dispose()


async def heartbeat(
    sessions: async_sessionmaker[AsyncSession], job_id: UUID, progress: dict[str, Any]
) -> bool:
    """Record liveness and progress; returns whether a cancel was requested."""
    async with sessions() as session:
        await session.execute(
            update(FineTuneJob)
            .where(FineTuneJob.id == job_id)
            .values(heartbeat_at=datetime.now(UTC), progress=progress)
        )
        cancel = await session.scalar(
            select(FineTuneJob.cancel_requested).where(FineTuneJob.id == job_id)
        )
        await session.commit()
    return bool(cancel)
