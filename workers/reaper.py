"""The beat-scheduled clean-ups: jobs whose worker went silent, and orphaned adapter objects.

A running job's worker writes a heartbeat every few seconds; one silent for longer than
`job_heartbeat_timeout_s` lost its worker (killed, out of memory, machine gone). It is
requeued to resume from its newest checkpoint, or failed once it has used up
`job_max_attempts`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from loraplex.db.models import FineTuneCheckpoint, FineTuneJob, JobStatus
from loraplex.finetune.transitions import add_event, fail, set_status
from loraplex.workers.job_spend import settle_ended
from loraplex.workers.task import TaskContext


async def reap_jobs(context: TaskContext, now: datetime | None = None) -> int:
    """Requeue (or fail, after too many tries) running jobs whose heartbeat stopped."""
    settings = context.settings
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=settings.job_heartbeat_timeout_s)
    requeued = 0
    async with context.sessions() as session:
        stuck = (
            await session.execute(
                select(FineTuneJob).where(
                    FineTuneJob.status == JobStatus.RUNNING, FineTuneJob.heartbeat_at < cutoff
                )
            )
        ).scalars()
        failed = []
        for job in list(stuck):
            if job.attempts >= settings.job_max_attempts:
                if await fail(
                    session,
                    job.id,
                    (JobStatus.RUNNING,),
                    code="worker_lost",
                    message=f"the worker stopped {job.attempts} times",
                    event="Worker lost too many times; job failed",
                ):
                    failed.append(job.id)
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
                await session.commit()  # the training worker must find the job queued
                context.queue.train(job.id)
        await session.commit()
    for job_id in failed:  # charged the steps its last heartbeat reported
        await settle_ended(settings, context.sessions, job_id)
    return requeued


async def reap_adapter_objects(context: TaskContext) -> None:
    """Fail dead uploads and delete object-store files no version owns."""
    from loraplex.control.adapters.reaper import reap as reap_objects

    async with context.sessions() as session:
        await reap_objects(session, context.store)
