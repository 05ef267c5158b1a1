"""Training files: validated as OpenAI chat (or preference) JSONL, stored in the object store."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import anyio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.control.adapters.versions import stored_bytes
from loraplex.control.audit.service import record
from loraplex.control.tenants.service import lock_tenant
from loraplex.cpu_pool import CpuPool, run_check
from loraplex.db.models import DatasetFile, FileStatus, FineTuneJob, JobStatus
from loraplex.errors import Conflict, InvalidInput, NotFound
from loraplex.evals.checks import EVALS_PURPOSE, check_eval_file
from loraplex.finetune.datasets import DatasetRejected, DatasetStats, validate_jsonl
from loraplex.finetune.ids import FILE, parse
from loraplex.finetune.limits import check_storage
from loraplex.finetune.quota import plan_limits, refuse

PURPOSE = "fine-tune"
MAX_ROWS = 100_000
CHUNK = 1 << 16


def detect_method(path: Path) -> str:
    """`dpo` for OpenAI preference rows, else `supervised` (decided by the first line)."""
    with path.open("rb") as handle:
        first = handle.readline(1 << 20)
    return "dpo" if b'"preferred_output"' in first else "supervised"


def check_file(path: Path, method: str, max_bytes: int) -> DatasetStats:
    """Validate the whole file from disk, chunk by chunk; raise DatasetRejected listing the
    bad lines. Runs in the API's worker processes (loraplex.cpu_pool)."""

    def chunks() -> Iterator[bytes]:
        with path.open("rb") as handle:
            while block := handle.read(CHUNK):
                yield block

    return validate_jsonl(
        chunks(),
        purpose_method=method,  # type: ignore[arg-type]
        max_rows=MAX_ROWS,
        max_bytes=max_bytes,
    )


def _as_invalid_input(exc: DatasetRejected) -> InvalidInput:
    """The 400 a user sees: the problem and the bad line numbers."""
    lines = "; ".join(str(e) for e in exc.errors[:20])
    return InvalidInput(f"{exc}: {lines}" if lines else str(exc), param="file")


class FileService:
    """A tenant's training files."""

    def __init__(self, session: AsyncSession, store: ObjectStore, cpu: CpuPool | None = None):
        self.session, self.store, self.cpu = session, store, cpu

    async def upload(
        self, tenant_id: UUID, purpose: str, path: Path, filename: str, max_bytes: int, actor: str
    ) -> DatasetFile:
        """Validate, store and register an uploaded JSONL file."""
        if purpose not in (PURPOSE, EVALS_PURPOSE):
            raise InvalidInput(f"purpose must be '{PURPOSE}' or '{EVALS_PURPOSE}'", param="purpose")
        await self._check_storage(tenant_id, (await anyio.Path(path).stat()).st_size, actor)
        if purpose == EVALS_PURPOSE:  # eval items: one {"item": {...}} a line (evals/checks.py)
            method, stats = "evals", await run_check(self.cpu, check_eval_file, path, max_bytes)
        else:
            method = detect_method(path)
            try:
                stats = await run_check(self.cpu, check_file, path, method, max_bytes)
            except DatasetRejected as exc:
                raise _as_invalid_input(exc) from exc
        sha = await anyio.to_thread.run_sync(_sha256, path)
        # Counted again under the tenant's row lock, held until this request commits: two
        # uploads at once could both pass the first count (before their checks) and be kept.
        await lock_tenant(self.session, tenant_id)
        await self._check_storage(tenant_id, stats.size_bytes, actor)
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

    async def _check_storage(self, tenant_id: UUID, size: int, actor: str) -> None:
        """Refuse a file that would take the tenant over `max_storage_bytes`, before its check."""
        limits = await plan_limits(self.session, tenant_id)
        used = await stored_bytes(self.session, tenant_id)
        refusal = check_storage(limits, used, size, "training file", "file")
        if refusal is not None:
            raise await refuse(self.session, tenant_id, actor, refusal)

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
