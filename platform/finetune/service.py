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
from loraplex.db.models import (
    Adapter,
    BaseModel,
    DatasetFile,
    FineTuneCheckpoint,
    FineTuneEvent,
    FineTuneJob,
    JobStatus,
    Tenant,
    TenantStatus,
)
from loraplex.db.models.finetune import TERMINAL
from loraplex.errors import Conflict, Forbidden, InvalidInput, NotFound, Unavailable
from loraplex.evals.gate import check_gate, gate_value, require_alias
from loraplex.finetune.ids import FILE, JOB, parse, public
from loraplex.finetune.limits import check_concurrency, check_job, job_shape
from loraplex.finetune.permissions import LEAST, JobRights, check_job_rights
from loraplex.finetune.queue import JobQueue
from loraplex.finetune.quota import plan_limits, refuse
from loraplex.finetune.schemas import AUTO, Hyperparameters, JobCreate
from loraplex.finetune.spend import (
    give_back,
    keep_hold,
    record_training_spend,
    reserve_training,
    settle_job,
    training_tokens,
)
from loraplex.finetune.transitions import ACTIVE, add_event, fail, set_status
from loraplex.gateway.admission.budgets import BudgetGuard

log = logging.getLogger("loraplex.finetune")


class JobService:
    """A tenant's fine-tuning jobs."""

    def __init__(self, session: AsyncSession):
        self.session = session

    async def create(
        self,
        tenant_id: UUID,
        data: JobCreate,
        actor: str,
        job_queue: JobQueue,
        *,
        rights: JobRights = LEAST,
        budgets: BudgetGuard | None = None,
        key_id: UUID | None = None,
    ) -> FineTuneJob:
        """Check the request, record the job as `validating_files`, commit, then enqueue it.

        `rights`: what the creator may change (permissions.py; the least when not given):
        the adapter the job adds a version to and the alias it moves on success are checked
        against them here.

        The commit comes first because the worker must find the job when the task arrives;
        the queue is a parameter so no caller can record a job and forget to send it.

        With `budgets`, the price of its training tokens is reserved from the tenant's and
        `key_id`'s budgets (finetune/spend.py) and given back if the job is not created.
        """
        base = (
            await self.session.execute(select(BaseModel).where(BaseModel.name == data.model))
        ).scalar_one_or_none()
        if base is None:
            raise InvalidInput(  # the name is not echoed: it is anything the client sent
                "model is not available for fine-tuning: it names no registered base model",
                param="model",
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
        await check_job_rights(self.session, tenant_id, suffix, data.alias, rights)
        if data.eval_gate is not None:
            require_alias(data.alias)
            await check_gate(self.session, tenant_id, data.eval_gate)
        hyper = _hyperparameters(data)
        limits = await plan_limits(self.session, tenant_id)
        refusal = check_job(limits, job_shape(training.rows, hyper, AUTO))
        if refusal is not None:
            raise await refuse(self.session, tenant_id, actor, refusal)
        await self._lock_active_tenant(tenant_id)
        await self._check_concurrency(tenant_id, limits, actor)
        tokens = training_tokens(training, hyper)
        hold = await reserve_training(budgets, tenant_id, key_id, limits, base.name, tokens)
        try:
            job = await self._record(tenant_id, data, actor, base, training, validation,
                                     method, suffix, hyper)  # fmt: skip
            await record_training_spend(self.session, tenant_id, key_id, base.name, tokens, hold)
            await self.session.commit()  # the worker must find the job when the task arrives
        except BaseException:
            await give_back(budgets, hold)
            raise
        await keep_hold(budgets, job, key_id, tokens, hold)  # settled when the job ends
        try:
            await self._enqueue(job, job_queue)
        except Unavailable:  # failed before it ran (`_enqueue` failed it): nothing is charged
            await self.session.refresh(job)
            await settle_job(budgets.quotas if budgets else None, self.session, job)
            raise
        return job

    async def _record(
        self, tenant_id: UUID, data: JobCreate, actor: str, base: BaseModel,
        training: DatasetFile, validation: DatasetFile | None, method: str, suffix: str,
        hyper: dict[str, Any],
    ) -> FineTuneJob:  # fmt: skip
        """Add the job, its first event and its audit entry to the session."""
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
            eval_gate=gate_value(data.eval_gate) if data.eval_gate else None,
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
        return job

    async def _enqueue(self, job: FineTuneJob, job_queue: JobQueue) -> None:
        """Send the committed job to the workers; a broker that does not answer fails it."""
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
        await self._request_cancel(job, actor, "Cancellation requested")
        await self.session.refresh(job)
        return job

    async def cancel_all(self, tenant_id: UUID, actor: str, reason: str) -> int:
        """Cancel every queued or running job of the tenant (it was suspended or deleted).

        Queued jobs end at once; a running job's worker sees `cancel_requested` at its next
        heartbeat (every few seconds) and stops within a training step. Returns how many.
        """
        jobs = await self.session.scalars(
            select(FineTuneJob).where(
                FineTuneJob.tenant_id == tenant_id, FineTuneJob.status.in_(ACTIVE)
            )
        )
        found = list(jobs)
        for job in found:
            await self._request_cancel(job, actor, f"Cancellation requested: {reason}", reason)
        return len(found)

    async def _request_cancel(
        self, job: FineTuneJob, actor: str, event: str, reason: str | None = None
    ) -> None:
        """Cancel a job not yet running now, and ask a running one's worker to stop."""
        if not await set_status(
            self.session,
            job.id,
            (JobStatus.VALIDATING_FILES, JobStatus.QUEUED),
            JobStatus.CANCELLED,
            finished_at=datetime.now(UTC),
            cancel_requested=True,
        ):
            await self.session.execute(
                update(FineTuneJob).where(FineTuneJob.id == job.id).values(cancel_requested=True)
            )
        await add_event(self.session, job.id, event)
        details = {"reason": reason} if reason else {}
        record(self.session, actor, "fine_tune_job.cancel", job, tenant_id=job.tenant_id, **details)

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

    async def _lock_active_tenant(self, tenant_id: UUID) -> None:
        """Lock the tenant's row until this transaction ends, and refuse a suspended tenant.

        Two creates at once would both count the active jobs before either inserts, and both
        pass the concurrent-job limit: the row lock (PostgreSQL's FOR UPDATE; SQLite
        serialises writers) makes the second wait for the first's commit and count its job.
        Suspension updates the same row, so a job is either created before the suspension
        (which then cancels it) or refused here.
        """
        status = await self.session.scalar(
            select(Tenant.status).where(Tenant.id == tenant_id).with_for_update()
        )
        if status != TenantStatus.ACTIVE:
            raise Forbidden(f"the tenant is {status}: it cannot start fine-tuning jobs")

    async def _check_concurrency(self, tenant_id: UUID, limits: dict[str, int], actor: str) -> None:
        active = (
            await self.session.scalar(
                select(func.count())
                .select_from(FineTuneJob)
                .where(FineTuneJob.tenant_id == tenant_id, FineTuneJob.status.in_(ACTIVE))
            )
            or 0
        )
        refusal = check_concurrency(limits, active)
        if refusal is not None:
            raise await refuse(self.session, tenant_id, actor, refusal)


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
