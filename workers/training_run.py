"""One training attempt of a job: claim it, fetch inputs, train in a thread, store the result.

Training runs in a thread; its callbacks hop back onto the task's event loop for database
writes, throttled so progress costs little. The loop must stay free for the heartbeat: a
running job silent for `job_heartbeat_timeout_s` is taken for lost and requeued by the reaper.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.db.models import BaseModel, DatasetFile, FineTuneCheckpoint, FineTuneJob, JobStatus
from loraplex.finetune.schemas import AUTO, CHECKPOINT_EVERY
from loraplex.finetune.transitions import add_event, claim, heartbeat, set_status
from loraplex.gateway.usage import SqlUsageWriter, UsageRecorder
from loraplex.settings import Settings
from loraplex.workers.checkpoint_store import (
    checkpoint_prefix,
    folder_bytes,
    record_and_prune,
    storage_allows,
)
from loraplex.workers.finish import register_result
from loraplex.workers.job_spend import settle_ended
from loraplex.workers.task import TaskContext

log = logging.getLogger("loraplex.workers")


async def train(context: TaskContext, job_id: UUID) -> None:
    """Run a queued job to its end; a duplicate or a job not queued is left alone."""
    async with context.sessions() as session:
        claimed = await claim(session, job_id)
        await session.commit()
    if claimed:
        await TrainingRun(job_id, context.settings, context.sessions, context.store).run()


class TrainingRun:
    """Trains one claimed (`running`) job to its end state."""

    def __init__(
        self,
        job_id: UUID,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        store: Any,
    ):
        self.job_id, self.settings, self.sessions = job_id, settings, sessions
        self.store = store
        self.cancel = False
        self.progress: dict[str, Any] = {}
        self._last_event = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> None:
        """Train, then mark the job succeeded, cancelled or failed (by compare-and-set)."""
        from loraplex.workers.trainer import TrainingCancelled

        self._loop = asyncio.get_running_loop()
        async with self.sessions() as session:
            job = await session.get_one(FineTuneJob, self.job_id)
            base = await session.get_one(BaseModel, job.base_model_id)
            await add_event(session, job.id, f"Fine-tuning started (attempt {job.attempts})")
            await session.commit()
        beats = asyncio.create_task(self._beat())
        try:
            with tempfile.TemporaryDirectory(prefix="loraplex-train-") as tmp:
                result = await self._train(job, base, Path(tmp))
                await self._succeed(job, result)
        except TrainingCancelled:
            await self._end(JobStatus.CANCELLED, "The job was cancelled")
        except asyncio.CancelledError:  # the task's soft time limit: the trainer has stopped
            await self._end(
                JobStatus.FAILED,
                "Training was interrupted: it ran past the task's time limit",
                error={"code": "training_interrupted", "message": "time limit", "param": None},
            )
            raise
        except Exception as exc:  # any failure must end the job, never leave it running
            log.exception("job %s failed", self.job_id)
            await self._end(
                JobStatus.FAILED,
                f"Training failed: {exc}",
                error={"code": "training_failed", "message": str(exc)[:1000], "param": None},
            )
        finally:
            beats.cancel()

    async def _train(self, job: FineTuneJob, base: BaseModel, tmp: Path) -> Any:
        from loraplex.workers.trainer import TrainConfig

        # Importing the trainer loads torch, seconds of work: off the loop, so the heartbeat
        # keeps beating and the reaper does not take a starting worker for a lost one.
        train = await asyncio.to_thread(_load_trainer)
        async with self.sessions() as session:
            train_file = await session.get_one(DatasetFile, job.training_file_id)
            valid_file = (
                await session.get(DatasetFile, job.validation_file_id)
                if job.validation_file_id
                else None
            )
            resume = await self._latest_checkpoint(session, tmp)
        train_path = await self._fetch(train_file, tmp / "train.jsonl")
        valid_path = await self._fetch(valid_file, tmp / "valid.jsonl") if valid_file else None
        hyper = {**AUTO, **{k: v for k, v in job.hyperparameters.items() if v != "auto"}}
        config = TrainConfig(
            base_model_dir=Path(base.source),
            train_path=train_path,
            out_dir=tmp / "adapter",
            method=job.method,
            validation_path=valid_path,
            n_epochs=hyper["n_epochs"],
            batch_size=hyper["batch_size"],
            learning_rate_multiplier=hyper["learning_rate_multiplier"],
            lora_r=hyper.get("lora_r", 16),
            lora_alpha=hyper.get("lora_alpha", 16.0),
            lora_dropout=hyper.get("lora_dropout", 0.05),
            load_in_4bit=hyper.get("load_in_4bit", True),
            seed=job.seed,
            checkpoint_dir=tmp / "checkpoints",
            checkpoint_every=int(hyper.get("checkpoint_every", CHECKPOINT_EVERY)),
            **(
                {"target_modules": tuple(hyper["target_modules"])}
                if hyper.get("target_modules")
                else {}
            ),
        )
        work = asyncio.ensure_future(
            asyncio.to_thread(
                train,
                config,
                on_progress=self._on_progress,
                should_stop=lambda: self.cancel,
                checkpoint=self._on_checkpoint,
                resume_from=resume,
            )
        )
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            # A thread cannot be cancelled: ask the trainer to stop at its next step and
            # wait for it, so this process never starts another task with a run still on
            # the device.
            self.cancel = True
            with contextlib.suppress(BaseException):
                await work
            raise

    async def _fetch(self, row: DatasetFile, path: Path) -> Path:
        await anyio.to_thread.run_sync(self.store.get_file, row.storage_key, path, row.sha256)
        return path

    async def _latest_checkpoint(self, session: AsyncSession, tmp: Path) -> Path | None:
        row = (
            await session.execute(
                select(FineTuneCheckpoint)
                .where(FineTuneCheckpoint.job_id == self.job_id)
                .order_by(FineTuneCheckpoint.step.desc())
                .limit(1)
            )
        ).scalar_one_or_none()
        if row is None:
            return None
        folder = tmp / "resume"
        for rel, sha in row.metrics.get("files", {}).items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            await anyio.to_thread.run_sync(
                self.store.get_file, row.storage_key + rel, folder / rel, sha
            )
        return folder

    def _on_progress(self, progress: Any) -> None:
        """Called by the trainer's thread after every step; events are throttled."""
        self.progress = {
            "step": progress.step,
            "total_steps": progress.total_steps,
            "loss": progress.loss,
            "learning_rate": progress.learning_rate,
            "tokens_per_s": progress.tokens_per_s,
            "eta_s": progress.eta_s,
        }
        now = time.monotonic()
        if (
            now - self._last_event >= self.settings.job_progress_interval_s
            or progress.step == progress.total_steps
        ):
            self._last_event = now
            message = (
                f"Step {progress.step}/{progress.total_steps}: training loss={progress.loss:.4f}"
            )
            self._call(self._event(message, kind="metrics", data=dict(self.progress)))

    def _on_checkpoint(self, folder: Path, step: int) -> None:
        """Called by the trainer's thread with a checkpoint folder: if the tenant's storage
        has room, upload it, record it and prune the job's older checkpoints."""
        size = folder_bytes(folder)
        if not self._call(storage_allows(self.sessions, self.job_id, step, size)):
            return
        prefix = checkpoint_prefix(self.job_id, step)
        files = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            files[rel] = self.store.put_file(prefix + rel, path).sha256
        kept = self.settings.job_checkpoints_kept
        self._call(
            record_and_prune(
                self.sessions, self.store, self.job_id, step, files, size, self.progress, kept
            )
        )

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(min(2.0, self.settings.job_heartbeat_timeout_s / 4))
            try:
                self.cancel = (
                    await heartbeat(self.sessions, self.job_id, self.progress) or self.cancel
                )
            except Exception as exc:  # a missed heartbeat is retried next time
                log.warning("heartbeat of %s failed: %s", self.job_id, exc)

    async def _succeed(self, job: FineTuneJob, result: Any) -> None:
        async with self.sessions() as session:
            job = await session.get_one(FineTuneJob, self.job_id)
            model, version_id = await register_result(
                session, job, result.adapter_dir, self.store, self.settings
            )
            note = "" if result.quantized else f" (trained without 4-bit: {result.fallback_reason})"
            gated = bool(job.eval_gate)
            if gated:  # the eval reaches the version through the API: commit it first
                waits = f"; alias {job.alias} moves only if it passes its eval"
                await add_event(
                    session, self.job_id, f"New fine-tuned model created: {model}{note}{waits}"
                )
                await session.commit()
                await self._gate(version_id)
            if await set_status(
                session,
                self.job_id,
                (JobStatus.RUNNING,),
                JobStatus.SUCCEEDED,
                fine_tuned_model=model,
                adapter_version_id=version_id,
                trained_tokens=result.trained_tokens,
                finished_at=datetime.now(UTC),
            ):
                if not gated:
                    await add_event(
                        session, self.job_id, f"New fine-tuned model created: {model}{note}"
                    )
                await add_event(session, self.job_id, "The job has successfully completed")
            await session.commit()
        await settle_ended(self.settings, self.sessions, self.job_id)
        usage = UsageRecorder(SqlUsageWriter(self.sessions))
        usage.record(job.tenant_id, version_id, f"fine-tune:{job.model}", result.trained_tokens, 0)
        await usage.flush()

    async def _gate(self, version_id: UUID) -> None:
        """Run the job's eval gate; a gate that cannot run leaves the alias where it is."""
        from loraplex.workers.eval_gate import run_gate

        try:
            await run_gate(self.settings, self.sessions, self.store, self.job_id, version_id)
        except Exception:
            log.exception("the eval gate of job %s could not run", self.job_id)
            await self._event("The alias stays: the eval gate could not run")

    async def _end(
        self, status: JobStatus, message: str, error: dict[str, Any] | None = None
    ) -> None:
        async with self.sessions() as session:
            if await set_status(
                session,
                self.job_id,
                (JobStatus.RUNNING,),
                status,
                error=error,
                finished_at=datetime.now(UTC),
                **({"progress": self.progress} if self.progress else {}),  # the steps done
            ):
                await add_event(session, self.job_id, message, level="error" if error else "info")
            await session.commit()
        await settle_ended(self.settings, self.sessions, self.job_id)

    async def _event(
        self, message: str, *, kind: str = "message", data: dict[str, Any] | None = None
    ) -> None:
        async with self.sessions() as session:
            await add_event(session, self.job_id, message, kind=kind, data=data)
            await session.commit()

    def _call(self, coroutine: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)


def _load_trainer() -> Any:
    from loraplex.workers.trainer import train

    return train
