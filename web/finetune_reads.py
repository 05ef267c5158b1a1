"""What the console's fine-tune page shows, read in one place: the job's settings, files and
times, its loss curve, checkpoints and events, and the adapter version it made.

The same services and rows as `/v1/fine_tuning/jobs/{id}` (and its `/events` and
`/checkpoints`), so the page and the API cannot disagree; another tenant's job is a 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.facts import PROJECTION_MODULES
from loraplex.db.models import (
    Adapter,
    AdapterAlias,
    AdapterVersion,
    DatasetFile,
    FineTuneCheckpoint,
    FineTuneEvent,
    FineTuneJob,
)
from loraplex.finetune.ids import FILE, JOB, public
from loraplex.finetune.schemas import AUTO, CHECKPOINT_EVERY
from loraplex.finetune.service import JobService
from loraplex.finetune.transitions import ACTIVE
from loraplex.web.charts import LineChart, line_chart

MAX_LOSS_POINTS = 2000  # newest events read for the loss curve
EVENTS_SHOWN = 50  # newest events listed; the page says how many there are in all
CHECKPOINTS_SHOWN = 20

# The job's stored hyperparameters as the page names them, in this order; keys not named
# here (a newer worker's) are shown under their own name after these.
HYPERPARAMETER_LABELS = {
    "n_epochs": "Epochs",
    "batch_size": "Batch size",
    "learning_rate_multiplier": "Learning rate multiplier",
    "lora_r": "LoRA rank (r)",
    "lora_alpha": "LoRA alpha",
    "lora_dropout": "LoRA dropout",
    "target_modules": "Target modules",
    "load_in_4bit": "4-bit base model (QLoRA)",
    "beta": "DPO beta",
    "checkpoint_every": "Checkpoint every (steps)",
}
DPO_ONLY = {"beta"}


def hyperparameter_rows(hyper: dict[str, Any], method: str) -> list[tuple[str, str]]:
    """(label, value) rows for the job's hyperparameters, as the page lists them."""
    shown = [k for k in HYPERPARAMETER_LABELS if method == "dpo" or k not in DPO_ONLY]
    keys = [k for k in shown if k in hyper]
    keys += sorted(k for k in hyper if k not in HYPERPARAMETER_LABELS)
    return [(HYPERPARAMETER_LABELS.get(k, k), _shown(k, hyper[k])) for k in keys]


def _shown(key: str, value: Any) -> str:
    if value == "auto" and key in AUTO:  # what the worker trains with for "auto"
        return f"auto ({_shown(key, AUTO[key])})"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return f"default ({', '.join(PROJECTION_MODULES)})" if key == "target_modules" else "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def human_duration(delta: timedelta) -> str:
    """`42 s`, `3 min 05 s`, `2 h 07 min`: how long, to the precision a person reads."""
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass(frozen=True)
class TrainingFile:
    """A file the job trains or validates on."""

    id: str
    filename: str
    rows: int


@dataclass(frozen=True)
class Result:
    """The adapter version a succeeded job made, and the aliases pointing at it."""

    adapter: str
    number: int
    status: str
    aliases: list[str]

    @property
    def model(self) -> str:
        """The `model` string that calls this version (`<adapter>@v<N>`)."""
        return f"{self.adapter}@v{self.number}"

    @property
    def servable(self) -> bool:
        """Only a ready version can be called or aliased."""
        return self.status == "ready"


@dataclass(frozen=True)
class Checkpoint:
    """A saved training state: the step and the metrics at that step."""

    step: int
    loss: float | None
    learning_rate: float | None
    files: int
    saved_at: datetime


@dataclass(frozen=True)
class JobPage:
    """Everything the fine-tune page shows about one job."""

    id: str
    job: FineTuneJob
    training_file: TrainingFile | None  # None: deleted since the job was created
    validation_file: TrainingFile | None
    hyperparameters: list[tuple[str, str]]
    loss: LineChart
    loss_points: int
    events: list[FineTuneEvent]  # newest first, at most EVENTS_SHOWN
    event_count: int
    checkpoints: list[Checkpoint]  # newest first
    result: Result | None
    now: datetime

    @property
    def active(self) -> bool:
        """Still validating, queued or running: the page keeps polling."""
        return self.job.status in ACTIVE

    @property
    def checkpoint_every(self) -> int:
        """Steps between the training states the worker saves (its default unless set)."""
        return int((self.job.hyperparameters or {}).get("checkpoint_every") or CHECKPOINT_EVERY)

    @property
    def step(self) -> int:
        """Steps done so far (the worker's last heartbeat)."""
        return int((self.job.progress or {}).get("step") or 0)

    @property
    def total_steps(self) -> int | None:
        """Steps the run will take, once the worker knows."""
        total = (self.job.progress or {}).get("total_steps")
        return int(total) if total else None

    @property
    def percent(self) -> float:
        """Steps done, 0-100."""
        return 100.0 * self.step / self.total_steps if self.total_steps else 0.0

    @property
    def duration(self) -> str | None:
        """How long it trained (or has been training); None before it started."""
        started = self.job.started_at
        if started is None:
            return None
        return human_duration((self.job.finished_at or self.now) - started)

    @property
    def loss_summary(self) -> str:
        """The loss curve in words, for screen readers and for anyone who wants the number."""
        chart = self.loss
        if chart.last is None:
            return "No training steps reported yet."
        of = f" of {self.total_steps}" if self.total_steps else ""
        return (
            f"Training loss {chart.last:.4f} at step {int(chart.x_max)}{of}, "
            f"from {chart.y_max:.4f} at its highest; {self.loss_points} points."
        )


async def job_page(session: AsyncSession, tenant_id: UUID, job_id: str) -> JobPage:
    """The tenant's job `job_id` (404 when not the tenant's) with all the page shows."""
    jobs = JobService(session)
    job = await jobs.get(tenant_id, job_id)
    events = await jobs.events(job, MAX_LOSS_POINTS)
    points = [
        (float(e.data["step"]), float(e.data["loss"]))
        for e in reversed(events)
        if e.type == "metrics" and "step" in e.data and e.data.get("loss") is not None
    ]
    count = await session.scalar(
        select(func.count()).select_from(FineTuneEvent).where(FineTuneEvent.job_id == job.id)
    )
    return JobPage(
        id=public(JOB, job.id),
        job=job,
        training_file=await _file(session, job.training_file_id),
        validation_file=await _file(session, job.validation_file_id),
        hyperparameters=hyperparameter_rows(job.hyperparameters or {}, job.method),
        loss=line_chart(points),
        loss_points=len(points),
        events=events[:EVENTS_SHOWN],
        event_count=int(count or 0),
        checkpoints=[_checkpoint(c) for c in await jobs.checkpoints(job, CHECKPOINTS_SHOWN)],
        result=await result_of(session, job),
        now=datetime.now(UTC),
    )


async def result_of(session: AsyncSession, job: FineTuneJob) -> Result | None:
    """The adapter version the job made (None before it succeeded), with its aliases."""
    if job.adapter_version_id is None:
        return None
    row = (
        await session.execute(
            select(Adapter.id, Adapter.name, AdapterVersion.number, AdapterVersion.status)
            .join(AdapterVersion, AdapterVersion.adapter_id == Adapter.id)
            .where(AdapterVersion.id == job.adapter_version_id, Adapter.tenant_id == job.tenant_id)
        )
    ).first()
    if row is None:
        return None
    aliases = await session.scalars(
        select(AdapterAlias.name)
        .where(
            AdapterAlias.adapter_id == row.id,
            AdapterAlias.version_id == job.adapter_version_id,
        )
        .order_by(AdapterAlias.name)
    )
    return Result(row.name, row.number, str(row.status), list(aliases.all()))


async def _file(session: AsyncSession, file_id: UUID | None) -> TrainingFile | None:
    """The file, or None when there is none or it was deleted since (the job keeps no id)."""
    row = await session.get(DatasetFile, file_id) if file_id else None
    return TrainingFile(public(FILE, row.id), row.filename, row.rows) if row else None


def _checkpoint(row: FineTuneCheckpoint) -> Checkpoint:
    metrics = row.metrics or {}
    return Checkpoint(
        step=row.step,
        loss=metrics.get("loss"),
        learning_rate=metrics.get("learning_rate"),
        files=len(metrics.get("files") or {}),
        saved_at=row.created_at,
    )
