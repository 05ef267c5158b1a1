"""A fine-tuning job's state changes and its event log, shared by the API and the workers.

Every status change is a compare-and-set (`UPDATE ... WHERE status IN (...)`), so a task that
runs twice, or a cancel that races the worker, cannot put a job into two states. None of these
commit: the caller decides what else belongs in the same transaction.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.db.models import FineTuneEvent, FineTuneJob, JobStatus

ACTIVE = (JobStatus.VALIDATING_FILES, JobStatus.QUEUED, JobStatus.RUNNING)


async def set_status(
    session: AsyncSession,
    job_id: UUID,
    expected: tuple[JobStatus, ...],
    new: JobStatus,
    **values: Any,
) -> bool:
    """Compare-and-set the job's status; False when it was not in `expected`."""
    result = await session.execute(
        update(FineTuneJob)
        .where(FineTuneJob.id == job_id, FineTuneJob.status.in_(expected))
        .values(status=new, **values)
        .returning(FineTuneJob.id)
    )
    return result.first() is not None


async def add_event(
    session: AsyncSession,
    job_id: UUID,
    message: str,
    *,
    level: str = "info",
    kind: str = "message",
    data: dict[str, Any] | None = None,
) -> None:
    """Append an event to the job's log."""
    session.add(
        FineTuneEvent(job_id=job_id, message=message, level=level, type=kind, data=data or {})
    )


async def fail(
    session: AsyncSession,
    job_id: UUID,
    expected: tuple[JobStatus, ...],
    *,
    code: str,
    message: str,
    event: str,
    param: str | None = None,
) -> bool:
    """Move the job from `expected` to `failed` with an OpenAI-shaped error and an error event.

    The event is written only when this call made the change, so a duplicate is silent.
    """
    error = {"code": code, "message": message, "param": param}
    if not await set_status(
        session, job_id, expected, JobStatus.FAILED, error=error, finished_at=datetime.now(UTC)
    ):
        return False
    await add_event(session, job_id, event, level="error")
    return True


async def claim(session: AsyncSession, job_id: UUID) -> bool:
    """Take a queued job for this worker (`queued` → `running`), counting the attempt."""
    now = datetime.now(UTC)
    return await set_status(
        session,
        job_id,
        (JobStatus.QUEUED,),
        JobStatus.RUNNING,
        started_at=now,
        heartbeat_at=now,
        worker=socket.gethostname(),
        attempts=FineTuneJob.attempts + 1,
    )


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
