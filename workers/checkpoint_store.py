"""A job's checkpoints in the object store: counted against storage, pruned to the last few.

Resuming needs only the newest checkpoint; `job_checkpoints_kept` (3 by default) are kept so a
checkpoint written by a worker that dies mid-upload never leaves the job without one. Every
kept checkpoint counts against the tenant's `max_storage_bytes` (its size is in
`metrics["bytes"]`); a checkpoint that would go over is not stored, and the run goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.adapters.versions import stored_bytes
from loraplex.db.models import FineTuneCheckpoint, FineTuneJob
from loraplex.finetune.ids import JOB, public
from loraplex.finetune.limits import check_storage
from loraplex.finetune.quota import CHECKPOINT_BYTES, plan_limits, refuse
from loraplex.finetune.transitions import add_event

log = logging.getLogger("loraplex.workers")


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under `folder`."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def checkpoint_prefix(job_id: UUID, step: int) -> str:
    """Where the checkpoint of `job_id` at `step` lives in the object store."""
    return f"checkpoints/{job_id}/{step:08d}/"


async def storage_allows(
    sessions: async_sessionmaker[AsyncSession], job_id: UUID, step: int, size: int
) -> bool:
    """Whether a checkpoint of `size` bytes fits the tenant's storage; if not, say so.

    A refusal is counted, audited and told in the job's events; the run continues (it only
    loses the chance to resume from this step).
    """
    async with sessions() as session:
        job = await session.get_one(FineTuneJob, job_id)
        limits = await plan_limits(session, job.tenant_id)
        used = await stored_bytes(session, job.tenant_id)
        refusal = check_storage(limits, used, size, "checkpoint", "checkpoint_every")
        if refusal is None:
            return True
        message = f"Checkpoint at step {step} not saved: {refusal.message}"
        await add_event(session, job_id, message, level="warn")
        await refuse(session, job.tenant_id, f"job:{public(JOB, job_id)}", refusal)  # commits
    return False


async def record_and_prune(
    sessions: async_sessionmaker[AsyncSession],
    store: Any,
    job_id: UUID,
    step: int,
    files: dict[str, str],
    size: int,
    progress: dict[str, Any],
    keep: int,
) -> None:
    """Record the checkpoint at `step`, then delete all but the newest `keep` of the job's.

    Rows go first, in the same commit as the new one, so no listing shows a checkpoint whose
    files are gone; objects follow (a crash between leaves unreferenced objects, never a
    row without its files).
    """
    async with sessions() as session:
        session.add(
            FineTuneCheckpoint(
                job_id=job_id,
                step=step,
                storage_key=checkpoint_prefix(job_id, step),
                metrics={"files": files, CHECKPOINT_BYTES: size, **progress},
            )
        )
        await add_event(session, job_id, f"Checkpoint saved at step {step}")
        await session.flush()
        old: list[FineTuneCheckpoint] = list(
            await session.scalars(
                select(FineTuneCheckpoint)
                .where(FineTuneCheckpoint.job_id == job_id)
                .order_by(FineTuneCheckpoint.step.desc())
                .offset(max(1, keep))
            )
        )
        if old:
            await session.execute(
                delete(FineTuneCheckpoint).where(FineTuneCheckpoint.id.in_([c.id for c in old]))
            )
        await session.commit()
    for checkpoint in old:
        try:
            await anyio.to_thread.run_sync(store.delete_prefix, checkpoint.storage_key)
        except Exception as exc:  # an object left behind costs storage, not the run
            log.warning("could not delete checkpoint %s: %s", checkpoint.storage_key, exc)
