"""Training files: validated as OpenAI chat (or preference) JSONL, stored in the object store."""

from __future__ import annotations

import hashlib
from pathlib import Path
from uuid import UUID

import anyio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.control.audit.service import record
from loraplex.db.models import DatasetFile, FileStatus, FineTuneJob, JobStatus
from loraplex.errors import Conflict, InvalidInput, NotFound
from loraplex.finetune.datasets import DatasetRejected, DatasetStats, validate_jsonl
from loraplex.finetune.ids import FILE, parse

PURPOSE = "fine-tune"
MAX_ROWS = 100_000
CHUNK = 1 << 16


def detect_method(path: Path) -> str:
    """`dpo` for OpenAI preference rows, else `supervised` (decided by the first line)."""
    with path.open("rb") as handle:
        first = handle.readline(1 << 20)
    return "dpo" if b'"preferred_output"' in first else "supervised"


def check_file(path: Path, method: str, max_bytes: int) -> DatasetStats:
    """Validate the whole file from disk, chunk by chunk; a 400 lists the bad line numbers."""

    def chunks() -> object:
        with path.open("rb") as handle:
            while block := handle.read(CHUNK):
                yield block

    try:
        return validate_jsonl(
            chunks(),
            purpose_method=method,
            max_rows=MAX_ROWS,  # type: ignore[arg-type]
            max_bytes=max_bytes,
        )
    except DatasetRejected as exc:
        lines = "; ".join(str(e) for e in exc.errors[:20])
        raise InvalidInput(f"{exc}: {lines}" if lines else str(exc), param="file") from exc


class FileService:
    """A tenant's training files."""

    def __init__(self, session: AsyncSession, store: ObjectStore):
        self.session, self.store = session, store

    async def upload(
        self, tenant_id: UUID, purpose: str, path: Path, filename: str, max_bytes: int, actor: str
    ) -> DatasetFile:
        """Validate, store and register an uploaded JSONL file."""
        if purpose != PURPOSE:
            raise InvalidInput(f"purpose must be '{PURPOSE}'", param="purpose")
        method = detect_method(path)
        stats = await anyio.to_thread.run_sync(check_file, path, method, max_bytes)
        sha = await anyio.to_thread.run_sync(_sha256, path)
        row = DatasetFile(
            tenant_id=tenant_id,
            purpose=purpose,
            filename=filename,
            bytes=stats.size_bytes,
            sha256=sha,
            rows=stats.rows,
            method=method,
            status=FileStatus.PROCESSED,
            details={"assistant_turns": stats.assistant_turns, "tokens": stats.tokens},
        )
        row.storage_key = f"files/{tenant_id}/{sha[:2]}/{sha}.jsonl"
        await anyio.to_thread.run_sync(self.store.put_file, row.storage_key, path)
        self.session.add(row)
        await self.session.flush()
        record(
            self.session,
            actor,
            "file.create",
            row,
            tenant_id=tenant_id,
            rows=stats.rows,
            method=method,
        )
        return row

    async def get(self, tenant_id: UUID, public_id: str) -> DatasetFile:
        """The tenant's file, or 404 (also for another tenant's)."""
        row = await self.session.get(DatasetFile, parse(FILE, public_id, "file"))
        if row is None or row.tenant_id != tenant_id:
            raise NotFound(f"No such File object: {public_id}")
        return row

    async def list(self, tenant_id: UUID) -> list[DatasetFile]:
        """The tenant's files, newest first."""
        rows = await self.session.execute(
            select(DatasetFile)
            .where(DatasetFile.tenant_id == tenant_id)
            .order_by(DatasetFile.created_at.desc())
            .limit(1000)
        )
        return list(rows.scalars())

    async def delete(self, tenant_id: UUID, public_id: str, actor: str) -> DatasetFile:
        """Delete a file no active job uses; its object goes when no other row shares it."""
        row = await self.get(tenant_id, public_id)
        busy = await self.session.scalar(
            select(FineTuneJob.id)
            .where(
                FineTuneJob.training_file_id == row.id,
                FineTuneJob.status.in_(
                    [JobStatus.VALIDATING_FILES, JobStatus.QUEUED, JobStatus.RUNNING]
                ),
            )
            .limit(1)
        )
        if busy:
            raise Conflict(f"file {public_id} is used by a running fine-tuning job")
        await self.session.delete(row)
        await self.session.flush()
        shared = await self.session.scalar(
            select(DatasetFile.id).where(DatasetFile.storage_key == row.storage_key)
        )
        if shared is None:
            await anyio.to_thread.run_sync(self.store.delete, row.storage_key)
        record(self.session, actor, "file.delete", row, tenant_id=tenant_id)
        return row


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()
