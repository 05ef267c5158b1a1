"""Checking a new job's files against its base model before it may train.

`validate` moves a job from `validating_files` to `queued` (and sends it to the `train`
queue) or to `failed` with the bad lines. Uploads were already checked row by row; this pass
adds what needs the base model: each row's token count against the model's context.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio

from loraplex.db.models import BaseModel, DatasetFile, FineTuneJob, JobStatus
from loraplex.finetune.datasets import DatasetRejected, validate_jsonl
from loraplex.finetune.files import CHUNK, MAX_ROWS
from loraplex.finetune.transitions import add_event, fail, set_status
from loraplex.workers.job_spend import settle_ended
from loraplex.workers.task import TaskContext


async def validate(context: TaskContext, job_id: UUID) -> None:
    """Validate the job's files against the base model's context; queue or fail the job."""
    async with context.sessions() as session:
        job = await session.get(FineTuneJob, job_id)
        if job is not None and job.status == JobStatus.QUEUED:
            # Validated before, and the training task may not have been sent (the broker
            # failed right after the commit): send it again; training starts only once.
            context.queue.train(job_id)
            return
        if job is None or job.status != JobStatus.VALIDATING_FILES:
            return  # cancelled, or a duplicate delivery
        base = await session.get_one(BaseModel, job.base_model_id)
        files = [
            await session.get_one(DatasetFile, f)
            for f in (job.training_file_id, job.validation_file_id)
            if f
        ]
        problem = await anyio.to_thread.run_sync(
            _check_files, files, job.method, base, context.store
        )
        if problem:
            await fail(
                session,
                job_id,
                (JobStatus.VALIDATING_FILES,),
                code="invalid_training_file",
                message=problem,
                param="training_file",
                event=f"Validation failed: {problem}",
            )
            await session.commit()
            await settle_ended(context.settings, context.sessions, job_id)
        elif await set_status(session, job_id, (JobStatus.VALIDATING_FILES,), JobStatus.QUEUED):
            await add_event(session, job_id, "Files validated; job queued")
            await session.commit()  # the training worker must find the job queued
            context.queue.train(job_id)
        await session.commit()


def _check_files(files: list[DatasetFile], method: str, base: BaseModel, store: Any) -> str | None:
    counter = _token_counter(Path(base.source))
    for row in files:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "data.jsonl"
            store.get_file(row.storage_key, path, row.sha256)
            try:
                validate_jsonl(
                    _chunks(path),
                    purpose_method=method,
                    max_rows=MAX_ROWS,
                    max_bytes=row.bytes + 1,  # type: ignore[arg-type]
                    max_tokens_per_row=base.max_context if counter else None,
                    count_tokens=counter,
                )
            except DatasetRejected as exc:
                lines = "; ".join(str(e) for e in exc.errors[:20])
                return f"{row.filename}: {exc}" + (f" ({lines})" if lines else "")
    return None


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            yield block


def _token_counter(model_dir: Path) -> Any:
    if not (model_dir / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer

    from loraplex.workers.trainer.examples import chat_token_counter

    return chat_token_counter(AutoTokenizer.from_pretrained(model_dir))
