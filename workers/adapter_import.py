"""Runs an adapter import: fetch the source's files, then the upload path's unpack,
validation and storage (`VersionService.upload`), so an import is held to what an upload is.

queued -> fetching -> validating -> succeeded | failed, each move a compare-and-set, so a
duplicate delivery finds the job past `queued` and does nothing. A failure leaves no version
and no object (validation refuses before anything is written; a store that fails mid-way
is cleaned up by the upload path), and the job names the problem.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
import anyio.from_thread
from sqlalchemy import and_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters import AdapterRejected
from loraplex.adapters.fetch import (
    FetchError,
    FetchLimits,
    fetch_source,
    parse_networks,
    source_from_message,
)
from loraplex.api.multipart import upload_workdir
from loraplex.auth.sealed import SealBroken, unseal
from loraplex.control.adapters.imports import event
from loraplex.control.adapters.versions import VersionService
from loraplex.db.models import Adapter, AdapterImport, ImportStatus, VersionSource
from loraplex.errors import LoraplexError
from loraplex.workers.task import TaskContext

log = logging.getLogger("loraplex.workers.import")
# A message older than this is refused: its sealed credentials are not kept useful forever.
MESSAGE_MAX_AGE_S = 24 * 3600
TASK_TIME_LIMIT_S = 3600  # the Celery hard limit of the import task
ACTIVE = (ImportStatus.QUEUED, ImportStatus.FETCHING, ImportStatus.VALIDATING)


class ImportFailed(Exception):
    """A refusal to record on the job: a short code and a message for the tenant."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


async def run_import(context: TaskContext, import_id: UUID, sealed_source: str) -> None:
    """Import the job's source as its adapter's next version, or fail the job saying why."""
    async with context.sessions() as session:
        if not await move(
            session, import_id, (ImportStatus.QUEUED,), ImportStatus.FETCHING, "fetching the source"
        ):
            return  # done or failed already: a duplicate delivery
        await session.commit()
        try:
            await _fetch_and_store(context, session, import_id, sealed_source)
        except ImportFailed as exc:
            await session.rollback()
            await fail(session, import_id, exc.code, exc.message)
        await session.commit()


async def _fetch_and_store(
    context: TaskContext, session: AsyncSession, import_id: UUID, sealed_source: str
) -> None:
    settings = context.settings
    job = await session.get_one(AdapterImport, import_id)
    adapter = await session.get_one(Adapter, job.adapter_id)
    actor = job.actor
    try:
        source = source_from_message(unseal(settings.secret_key, sealed_source, MESSAGE_MAX_AGE_S))
    except SealBroken as exc:
        raise ImportFailed(
            "expired", "the import waited too long in the queue; start it again"
        ) from exc
    limits = FetchLimits(
        allowed=parse_networks(settings.import_allow_networks),
        max_bytes=settings.max_upload_bytes,
        deadline=time.monotonic() + settings.import_timeout_s,
        ca_file=settings.import_ca_file,
        progress=progress_reporter(context, import_id),
    )
    with upload_workdir(settings.data_dir) as workdir:
        received = workdir / "received"
        received.mkdir()
        try:
            files = await anyio.to_thread.run_sync(
                fetch_source, source, received, limits, settings.hub_endpoint
            )
        except FetchError as exc:
            raise ImportFailed(exc.problem.value, exc.message) from exc
        fetched = sum(f.stat().st_size for f in files)
        await move(
            session,
            import_id,
            (ImportStatus.FETCHING,),
            ImportStatus.VALIDATING,
            f"fetched {len(files)} file(s), {fetched} bytes; validating",
            bytes_fetched=fetched,
        )
        await session.commit()
        version = await _store(context, session, adapter, files, workdir, actor)
    await move(
        session,
        import_id,
        (ImportStatus.VALIDATING,),
        ImportStatus.SUCCEEDED,
        f"stored as version {version.number}",
        version_id=version.id,
    )


def progress_reporter(context: TaskContext, import_id: UUID) -> Callable[[int], None]:
    """A callback for the fetching thread: shows the bytes fetched so far on the job, at
    most once per `job_progress_interval_s` (its own session: the task's is in use)."""
    last_report = -float("inf")

    async def record(fetched: int) -> None:
        async with context.sessions() as session:
            await session.execute(
                update(AdapterImport)
                .where(AdapterImport.id == import_id, AdapterImport.status == ImportStatus.FETCHING)
                .values(bytes_fetched=fetched)
            )
            await session.commit()

    def report(fetched: int) -> None:
        nonlocal last_report
        if time.monotonic() - last_report >= context.settings.job_progress_interval_s:
            last_report = time.monotonic()
            anyio.from_thread.run(record, fetched)

    return report


async def _store(
    context: TaskContext,
    session: AsyncSession,
    adapter: Adapter,
    files: list[Path],
    workdir: Path,
    actor: str,
) -> Any:
    try:
        return await VersionService(session=session).upload(
            adapter,
            files,
            workdir,
            context.store,
            context.settings,
            actor,
            source=VersionSource.IMPORT,
        )
    except AdapterRejected as exc:
        raise ImportFailed(exc.code.value, exc.message) from exc
    except LoraplexError as exc:  # the storage quota, an object store outage
        raise ImportFailed(exc.code, exc.detail) from exc


async def move(
    session: AsyncSession,
    import_id: UUID,
    expected: tuple[ImportStatus, ...],
    new: ImportStatus,
    message: str,
    **values: Any,
) -> bool:
    """Compare-and-set the job's status, adding `message` to its events; False when the job
    was not in `expected`. Only the one worker running the job writes its events."""
    job = await session.get(AdapterImport, import_id, populate_existing=True)
    if job is None or job.status not in expected:
        return False
    result = await session.execute(
        update(AdapterImport)
        .where(AdapterImport.id == import_id, AdapterImport.status.in_(expected))
        .values(status=new, events=[*job.events, event(message)], **values)
        .returning(AdapterImport.id)
    )
    return result.first() is not None


async def fail(session: AsyncSession, import_id: UUID, code: str, message: str) -> None:
    """Fail an active job with a named problem (not committed)."""
    log.info("import %s failed: %s: %s", import_id, code, message)
    await move(
        session,
        import_id,
        ACTIVE,
        ImportStatus.FAILED,
        f"failed: {message}",
        error={"code": code, "message": message[:1000]},
    )


async def reap_imports(context: TaskContext, now: datetime | None = None) -> int:
    """Fail imports no worker can still be running: past the task's hard time limit since
    their last step, or queued longer than their sealed message stays valid."""
    now = now or datetime.now(UTC)
    lost = now - timedelta(seconds=TASK_TIME_LIMIT_S + 60)
    expired = now - timedelta(seconds=MESSAGE_MAX_AGE_S)
    async with context.sessions() as session:
        rows = (
            await session.execute(
                select(AdapterImport.id, AdapterImport.status).where(
                    or_(
                        and_(
                            AdapterImport.status.in_(
                                (ImportStatus.FETCHING, ImportStatus.VALIDATING)
                            ),
                            AdapterImport.updated_at < lost,
                        ),
                        and_(
                            AdapterImport.status == ImportStatus.QUEUED,
                            AdapterImport.updated_at < expired,
                        ),
                    )
                )
            )
        ).all()
        for import_id, status in rows:
            if status == ImportStatus.QUEUED:
                await fail(session, import_id, "expired", "no worker took the import in time")
            else:
                await fail(
                    session, import_id, "worker_lost", "the worker running the import stopped"
                )
        await session.commit()
    return len(rows)
