"""Evals (OpenAI's Evals API shape): an eval, its runs and each run's output items."""

from __future__ import annotations

import enum
from typing import Any
from uuid import UUID

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class RunStatus(enum.StrEnum):
    """OpenAI's eval run statuses."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


class Eval(Base):
    """An item schema and the testing criteria every run is graded by."""

    __tablename__ = "evals"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200), default="")
    data_source_config: Mapped[dict[str, Any]] = mapped_column(JSON)
    testing_criteria: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    meta: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)


class EvalRun(Base):
    """One run of an eval: a model answers every item, the criteria grade the answers.

    `adapter_version_id` and `fine_tune_job_id` are set when a fine-tune's gate ran it: the
    scores it records belong to that version.
    """

    __tablename__ = "eval_runs"

    eval_id: Mapped[UUID] = mapped_column(ForeignKey("evals.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200), default="")
    model: Mapped[str] = mapped_column(String(200))
    status: Mapped[RunStatus] = mapped_column(String(16), default=RunStatus.QUEUED, index=True)
    data_source: Mapped[dict[str, Any]] = mapped_column(JSON)
    result_counts: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    per_testing_criteria_results: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    per_model_usage: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    meta: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    adapter_version_id: Mapped[UUID | None] = mapped_column(default=None)
    fine_tune_job_id: Mapped[UUID | None] = mapped_column(default=None)


class EvalRunItem(Base):
    """One item of a run: the item, the model's sample and each criterion's result."""

    __tablename__ = "eval_run_items"

    run_id: Mapped[UUID] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int]  # the item's index in the data source (`datasource_item_id`)
    status: Mapped[str] = mapped_column(String(16))  # pass | fail | error
    item: Mapped[dict[str, Any]] = mapped_column(JSON)
    sample: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    results: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
