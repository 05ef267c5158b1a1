"""Fine-tuning: uploaded datasets, jobs, their events and checkpoints (OpenAI's shapes)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any
from uuid import UUID

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import JSON, BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class FileStatus(enum.StrEnum):
    """OpenAI's file statuses."""

    UPLOADED = "uploaded"
    PROCESSED = "processed"
    ERROR = "error"


class JobStatus(enum.StrEnum):
    """OpenAI's fine-tuning job statuses."""

    VALIDATING_FILES = "validating_files"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class DatasetFile(Base):
    """A JSONL file uploaded for fine-tuning, validated while it streamed in."""

    __tablename__ = "files"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    purpose: Mapped[str] = mapped_column(String(32))
    filename: Mapped[str] = mapped_column(String(255))
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    sha256: Mapped[str] = mapped_column(String(64), default="")
    storage_key: Mapped[str] = mapped_column(String(500), default="")
    rows: Mapped[int] = mapped_column(default=0)
    method: Mapped[str] = mapped_column(String(16), default="supervised")  # supervised | dpo
    status: Mapped[FileStatus] = mapped_column(String(16), default=FileStatus.PROCESSED)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class FineTuneJob(Base):
    """One fine-tuning job; `status` moves by compare-and-set so tasks are idempotent."""

    __tablename__ = "fine_tune_jobs"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    base_model_id: Mapped[UUID] = mapped_column(ForeignKey("base_models.id", ondelete="RESTRICT"))
    model: Mapped[str] = mapped_column(String(200))
    # SET NULL: deleting a training file after the job is allowed, as at OpenAI.
    training_file_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("files.id", ondelete="SET NULL")
    )
    validation_file_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("files.id", ondelete="SET NULL"), default=None
    )
    suffix: Mapped[str] = mapped_column(String(64))
    seed: Mapped[int] = mapped_column(default=0)
    method: Mapped[str] = mapped_column(String(16), default="supervised")
    hyperparameters: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[JobStatus] = mapped_column(
        String(20), default=JobStatus.VALIDATING_FILES, index=True
    )
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    fine_tuned_model: Mapped[str | None] = mapped_column(String(200), default=None)
    adapter_version_id: Mapped[UUID | None] = mapped_column(default=None)
    alias: Mapped[str | None] = mapped_column(
        String(64), default=None
    )  # moved to the result on success
    # {"eval_id", "threshold", "baseline", "margin"}: the alias moves only if the new version
    # passes this eval (loraplex.evals.gate); None: it moves when training succeeds.
    eval_gate: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    trained_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    attempts: Mapped[int] = mapped_column(default=0)
    worker: Mapped[str] = mapped_column(String(200), default="")
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
    started_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)


class FineTuneEvent(Base):
    """A progress or status message of a job."""

    __tablename__ = "fine_tune_events"

    job_id: Mapped[UUID] = mapped_column(
        ForeignKey("fine_tune_jobs.id", ondelete="CASCADE"), index=True
    )
    level: Mapped[str] = mapped_column(String(8), default="info")
    type: Mapped[str] = mapped_column(String(16), default="message")  # message | metrics
    message: Mapped[str] = mapped_column(String(1000))
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class FineTuneCheckpoint(Base):
    """A saved training state in the object store; a lost worker resumes from the newest."""

    __tablename__ = "fine_tune_checkpoints"

    job_id: Mapped[UUID] = mapped_column(
        ForeignKey("fine_tune_jobs.id", ondelete="CASCADE"), index=True
    )
    step: Mapped[int]
    storage_key: Mapped[str] = mapped_column(String(500))
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
