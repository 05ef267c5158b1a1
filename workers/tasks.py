"""The Celery tasks: named, idempotent, declared through `worker_task`.

Each takes ids, never objects; each job step starts with a status compare-and-set, so a
duplicate delivery or a retry is a no-op where the step already happened. Only `train` acks
late: it checkpoints, so running it again after a lost worker resumes rather than repeats.
The beat-scheduled reapers do not retry: the next beat runs them again.
"""

from __future__ import annotations

from uuid import UUID

from loraplex.db.models import JobStatus
from loraplex.finetune.queue import TaskName
from loraplex.finetune.transitions import fail
from loraplex.workers import reaper, training_run, validation
from loraplex.workers.task import GiveUp, TaskContext, worker_task


def fail_job_from(status: JobStatus, code: str, what: str) -> GiveUp:
    """A give-up step that fails the task's job if it is still in `status`, with an event."""

    async def give_up(context: TaskContext, exc: BaseException, job_id: str) -> None:
        async with context.sessions() as session:
            await fail(
                session,
                UUID(job_id),
                (status,),
                code=code,
                message=f"{what}: {exc}"[:1000],
                event=f"{what}: {exc}",
            )
            await session.commit()

    return give_up


@worker_task(
    TaskName.VALIDATE,
    time_limit_s=900,
    retries=3,
    on_give_up=fail_job_from(
        JobStatus.VALIDATING_FILES, "validation_error", "Validation could not run"
    ),
)
async def validate(context: TaskContext, job_id: str) -> None:
    """Check a new job's files against the base model; queue its training or fail it."""
    await validation.validate(context, UUID(job_id))


@worker_task(
    TaskName.TRAIN,
    time_limit_s=24 * 3600,
    retries=2,
    acks_late=True,
    # A job this task claimed is `running`: the run itself ends it, or the reaper requeues
    # it once its heartbeat stops. Only a job the task never managed to claim is failed here.
    on_give_up=fail_job_from(JobStatus.QUEUED, "training_failed", "Training could not start"),
)
async def train(context: TaskContext, job_id: str) -> None:
    """Train a queued job (resuming from its newest checkpoint) and register the adapter."""
    await training_run.train(context, UUID(job_id))


@worker_task(TaskName.REAP_JOBS, time_limit_s=120)
async def reap(context: TaskContext) -> None:
    """Requeue or fail running jobs whose worker stopped sending heartbeats."""
    await reaper.reap_jobs(context)


@worker_task(TaskName.REAP_ADAPTER_OBJECTS, time_limit_s=1800)
async def reap_adapter_objects(context: TaskContext) -> None:
    """Fail dead uploads and delete object-store files no version owns."""
    await reaper.reap_adapter_objects(context)
