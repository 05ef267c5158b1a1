"""A tenant's fine-tuning jobs: create (check, record, commit, enqueue), read, cancel.

The API and the console only record intent through `JobService`; Celery tasks in
`loraplex.workers` do the work. Status changes go through `loraplex.finetune.transitions`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import anyio
import msgspec
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.audit.service import record
from loraplex.control.tenants.service import limits_of
from loraplex.db.models import (
    Adapter,
    BaseModel,
    DatasetFile,
    FineTuneCheckpoint,
    FineTuneEvent,
    FineTuneJob,
    JobStatus,
)
from loraplex.db.models.finetune import TERMINAL
from loraplex.errors import Conflict, InvalidInput, NotFound, QuotaExceeded, Unavailable
from loraplex.finetune.ids import FILE, JOB, parse, public
from loraplex.finetune.queue import JobQueue
from loraplex.finetune.schemas import Hyperparameters, JobCreate
from loraplex.finetune.transitions import ACTIVE, add_event, fail, set_status

log = logging.getLogger("loraplex.finetune")


class JobService:
    """A tenant's fine-tuning jobs."""

    def __init__(self, session: AsyncSession):
        self.session = session

    async def create(
        self, tenant_id: UUID, data: JobCreate, actor: str, job_queue: JobQueue
    ) -> FineTuneJob:
        """Check the request, record the job as `validating_files`, commit, then enqueue it.

        The commit comes first because the worker must find the job when the task arrives;
        the queue is a parameter so no caller can record a job and forget to send it.
        """
        base = (
            await self.session.execute(select(BaseModel).where(BaseModel.name == data.model))
        ).scalar_one_or_none()
        if base is None:
            raise InvalidInput(
                f"Model {data.model} is not available for fine-tuning", param="model"
            )
        training = await self._file(tenant_id, data.training_file, "training_file")
        validation = (
            await self._file(tenant_id, data.validation_file, "validation_file")
            if data.validation_file
            else None
        )
        method = data.method.type if data.method else training.method
        if training.method != method:
            raise InvalidInput(
                f"training_file holds {training.method} rows but method is {method}",
                param="training_file",
            )
        suffix = data.suffix or f"ft-{training.id.hex[:8]}"
        await self._check_suffix(tenant_id, suffix, base)
        await self._check_concurrency(tenant_id)
        hyper = _hyperparameters(data)
        job = FineTuneJob(
            tenant_id=tenant_id,
            base_model_id=base.id,
            model=base.name,
            training_file_id=training.id,
            validation_file_id=validation.id if validation else None,
            suffix=suffix,
            seed=data.seed if data.seed is not None else 0,
            method=method,
            hyperparameters=hyper,
            status=JobStatus.VALIDATING_FILES,
            alias=data.alias,
        )
        self.session.add(job)
        await self.session.flush()
        await add_event(self.session, job.id, f"Created fine-tuning job: {public(JOB, job.id)}")
        record(
            self.session,
            actor,
            "fine_tune_job.create",
            job,
            tenant_id=tenant_id,
            model=base.name,
            suffix=suffix,
        )
        await self.session.commit()  # the worker must find the job when the task arrives
        try:  # a broker that is down can block a send for seconds: off the event loop
            await anyio.to_thread.run_sync(job_queue.validate, job.id)
        except Exception as exc:
            log.warning("could not queue the validation of job %s: %s", job.id, exc)
            await fail(
                self.session,
                job.id,
                (JobStatus.VALIDATING_FILES,),
                code="queue_unavailable",
                message="the job could not be queued; create it again",
                event="The job could not be queued (the task broker did not answer)",
            )
            await self.session.commit()
            raise Unavailable("the fine-tuning queue is unavailable; try again shortly") from None
        return job

    async def get(self, tenant_id: UUID, public_id: str) -> FineTuneJob:
        """The tenant's job, or 404."""
        job = await self.session.get(FineTuneJob, parse(JOB, public_id, "fine-tuning job"))
        if job is None or job.tenant_id != tenant_id:
            raise NotFound(f"No such fine-tuning job: {public_id}")
        return job

    async def list(self, tenant_id: UUID, limit: int, after: str | None) -> list[FineTuneJob]:
        """The tenant's jobs, newest first, after the job `after`."""
        query = select(FineTuneJob).where(FineTuneJob.tenant_id == tenant_id)
        if after:
            query = query.where(FineTuneJob.id < parse(JOB, after, "fine-tuning job"))
        rows = await self.session.execute(query.order_by(FineTuneJob.id.desc()).limit(limit))
        return list(rows.scalars())

    async def events(self, job: FineTuneJob, limit: int) -> list[FineTuneEvent]:
        """The job's events, newest first."""
        rows = await self.session.execute(
            select(FineTuneEvent)
            .where(FineTuneEvent.job_id == job.id)
            .order_by(FineTuneEvent.id.desc())
            .limit(limit)
        )
        return list(rows.scalars())

    async def checkpoints(self, job: FineTuneJob, limit: int) -> list[FineTuneCheckpoint]:
        """The job's checkpoints, newest first."""
        rows = await self.session.execute(
            select(FineTuneCheckpoint)
            .where(FineTuneCheckpoint.job_id == job.id)
            .order_by(FineTuneCheckpoint.step.desc())
            .limit(limit)
        )
        return list(rows.scalars())

    async def cancel(self, tenant_id: UUID, public_id: str, actor: str) -> FineTuneJob:
        """Cancel: at once when not started, cooperatively (within a step) when running."""
        job = await self.get(tenant_id, public_id)
        if job.status in TERMINAL:
            raise Conflict(f"job {public_id} is already {job.status}")
        now = datetime.now(UTC)
        if not await set_status(
            self.session,
            job.id,
            (JobStatus.VALIDATING_FILES, JobStatus.QUEUED),
            JobStatus.CANCELLED,
            finished_at=now,
            cancel_requested=True,
        ):
            await self.session.execute(
                update(FineTuneJob).where(FineTuneJob.id == job.id).values(cancel_requested=True)
            )
        await add_event(self.session, job.id, "Cancellation requested")
        record(self.session, actor, "fine_tune_job.cancel", job, tenant_id=tenant_id)
        await self.session.refresh(job)
        return job

    async def file_ids(self, job: FineTuneJob) -> tuple[str, str | None]:
        """The public ids of the job's files."""
        return (
            public(FILE, job.training_file_id) if job.training_file_id else "",
            public(FILE, job.validation_file_id) if job.validation_file_id else None,
        )

    async def _file(self, tenant_id: UUID, public_id: str, param: str) -> DatasetFile:
        row = (
            await self.session.get(DatasetFile, parse(FILE, public_id, "file"))
            if public_id.startswith(FILE)
            else None
        )
        if row is None or row.tenant_id != tenant_id:
            raise InvalidInput(f"invalid {param}: no such file {public_id}", param=param)
        return row

    async def _check_suffix(self, tenant_id: UUID, suffix: str, base: BaseModel) -> None:
        existing = (
            await self.session.execute(
                select(Adapter).where(Adapter.tenant_id == tenant_id, Adapter.name == suffix)
            )
        ).scalar_one_or_none()
        if existing is not None and existing.base_model_id != base.id:
            raise Conflict(
                f"adapter '{suffix}' exists on another base model; pick another suffix",
                param="suffix",
            )

    async def _check_concurrency(self, tenant_id: UUID) -> None:
        limit = (await limits_of(self.session, tenant_id)).get("concurrent_fine_tunes")
        active = (
            await self.session.scalar(
                select(func.count())
                .select_from(FineTuneJob)
                .where(FineTuneJob.tenant_id == tenant_id, FineTuneJob.status.in_(ACTIVE))
            )
            or 0
        )
        if limit is not None and active >= limit:
            raise QuotaExceeded(
                f"the plan allows {limit} concurrent fine-tuning jobs; {active} are active",
                param="model",
            )


def _hyperparameters(data: JobCreate) -> dict[str, Any]:
    """Merge top-level and method hyperparameters into one validated dict."""
    merged: dict[str, Any] = {}
    if data.hyperparameters is not None:
        merged.update(
            {k: getattr(data.hyperparameters, k) for k in data.hyperparameters.__struct_fields__}
        )
    if data.method is not None:
        extra = (getattr(data.method, data.method.type) or {}).get("hyperparameters") or {}
        try:
            checked = msgspec.convert({**merged, **extra}, Hyperparameters)
        except msgspec.ValidationError as exc:
            raise InvalidInput(f"invalid hyperparameters: {exc}", param="method") from exc
        merged = {k: getattr(checked, k) for k in checked.__struct_fields__}
    if not merged:
        merged = {k: getattr(Hyperparameters(), k) for k in Hyperparameters.__struct_fields__}
    return merged
