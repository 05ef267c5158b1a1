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
from loraplex.workers import adapter_import, eval_run, reaper, training_run, validation
from loraplex.workers.job_spend import settle_ended
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
        await settle_ended(context.settings, context.sessions, UUID(job_id))

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
    """Requeue or fail running jobs whose worker stopped sending heartbeats; fail imports
    whose worker is gone."""
    await reaper.reap_jobs(context)
    await adapter_import.reap_imports(context)


@worker_task(TaskName.REAP_ADAPTER_OBJECTS, time_limit_s=1800)
async def reap_adapter_objects(context: TaskContext) -> None:
    """Fail dead uploads and delete object-store files no version owns."""
    await reaper.reap_adapter_objects(context)


async def fail_import(context: TaskContext, exc: BaseException, import_id: str, *_: str) -> None:
    """The give-up step of an import: the job fails without the internal error's text."""
    async with context.sessions() as session:
        await adapter_import.fail(
            session, UUID(import_id), "import_failed", "the import could not run; try again"
        )
        await session.commit()


@worker_task(TaskName.IMPORT_ADAPTER, time_limit_s=3600, on_give_up=fail_import)
async def import_adapter(context: TaskContext, import_id: str, sealed_source: str) -> None:
    """Fetch an adapter from its source and store it as a version (or fail the job)."""
    await adapter_import.run_import(context, UUID(import_id), sealed_source)


async def fail_eval_run(context: TaskContext, exc: BaseException, run_id: str) -> None:
    """The give-up step of an eval run (its worker hit the time limit): the run fails."""
    async with context.sessions() as session:
        await eval_run.fail(session, UUID(run_id), "run_failed", "the run ran past its time limit")
        await session.commit()


@worker_task(TaskName.RUN_EVAL, time_limit_s=eval_run.RUN_TIME_LIMIT_S, on_give_up=fail_eval_run)
async def run_eval(context: TaskContext, run_id: str) -> None:
    """Generate and grade a queued eval run (a duplicate delivery does nothing)."""
    await eval_run.run_eval(context, UUID(run_id))
