"""OpenAI's files and fine-tuning shapes, built from rows."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from loraplex.db.models import DatasetFile, FineTuneCheckpoint, FineTuneEvent, FineTuneJob
from loraplex.evals.schemas import EvalGate
from loraplex.finetune.ids import CHECKPOINT, EVENT, FILE, JOB, public

LoraTarget = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


CHECKPOINT_EVERY = 20  # steps between saved training states: a lost worker redoes at most this
# What the worker trains with where a job says "auto"; the console shows the same values.
AUTO = {"n_epochs": 3, "batch_size": 8, "learning_rate_multiplier": 1.0}


class Hyperparameters(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """OpenAI's hyperparameters plus Loraplex's LoRA settings."""

    n_epochs: Annotated[int, msgspec.Meta(ge=1, le=1000)] | Literal["auto"] = "auto"
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=256)] | Literal["auto"] = "auto"
    learning_rate_multiplier: Annotated[float, msgspec.Meta(gt=0, le=100)] | Literal["auto"] = (
        "auto"
    )
    lora_r: Annotated[int, msgspec.Meta(ge=1, le=256)] = 16
    lora_alpha: Annotated[float, msgspec.Meta(gt=0)] = 16.0
    lora_dropout: Annotated[float, msgspec.Meta(ge=0, lt=1)] = 0.05
    target_modules: list[LoraTarget] | None = None
    load_in_4bit: bool = True
    beta: Annotated[float, msgspec.Meta(gt=0)] | Literal["auto"] = "auto"  # DPO
    checkpoint_every: Annotated[int, msgspec.Meta(ge=1)] = CHECKPOINT_EVERY


class Method(msgspec.Struct, kw_only=True):
    """OpenAI's `method`: {"type": "supervised"|"dpo", "<type>": {"hyperparameters": {...}}}."""

    type: Literal["supervised", "dpo"] = "supervised"
    supervised: dict[str, Any] | None = None
    dpo: dict[str, Any] | None = None


class JobCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/fine_tuning/jobs."""

    model: str
    training_file: str
    validation_file: str | None = None
    suffix: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$(?!\n)")] | None = None
    seed: int | None = None
    hyperparameters: Hyperparameters | None = None
    method: Method | None = None
    alias: Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_-]{0,63}$(?!\n)")] | None = (
        None  # extension
    )
    integrations: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None
    eval_gate: EvalGate | None = None  # extension: the alias moves only if the eval passes


def file_object(row: DatasetFile) -> dict[str, Any]:
    """OpenAI's file object."""
    return {
        "id": public(FILE, row.id),
        "object": "file",
        "bytes": row.bytes,
        "created_at": int(row.created_at.timestamp()),
        "filename": row.filename,
        "purpose": row.purpose,
        "status": row.status,
        "status_details": row.details.get("error"),
    }


def job_object(row: FineTuneJob, training_file: str, validation_file: str | None) -> dict[str, Any]:
    """OpenAI's fine_tuning.job object."""
    hyper = {
        k: row.hyperparameters.get(k, "auto")
        for k in ("n_epochs", "batch_size", "learning_rate_multiplier")
    }
    return {
        "id": public(JOB, row.id),
        "object": "fine_tuning.job",
        "created_at": int(row.created_at.timestamp()),
        "finished_at": int(row.finished_at.timestamp()) if row.finished_at else None,
        "model": row.model,
        "fine_tuned_model": row.fine_tuned_model,
        "organization_id": str(row.tenant_id),
        "result_files": [],
        "status": row.status,
        "validation_file": validation_file,
        "training_file": training_file,
        "hyperparameters": hyper,
        "trained_tokens": row.trained_tokens or None,
        "error": row.error,
        "seed": row.seed,
        "suffix": row.suffix,
        "estimated_finish": _eta(row),
        "integrations": [],
        "method": {"type": row.method, row.method: {"hyperparameters": {**hyper, **_lora(row)}}},
        "user_provided_suffix": row.suffix,
        "eval_gate": row.eval_gate,  # extension: the eval the alias move waits on
    }


def event_object(row: FineTuneEvent) -> dict[str, Any]:
    """OpenAI's fine_tuning.job.event object."""
    return {
        "id": public(EVENT, row.id),
        "object": "fine_tuning.job.event",
        "created_at": int(row.created_at.timestamp()),
        "level": row.level,
        "message": row.message,
        "data": row.data,
        "type": row.type,
    }


def checkpoint_object(row: FineTuneCheckpoint, job: FineTuneJob) -> dict[str, Any]:
    """OpenAI's fine_tuning.job.checkpoint object."""
    return {
        "id": public(CHECKPOINT, row.id),
        "object": "fine_tuning.job.checkpoint",
        "created_at": int(row.created_at.timestamp()),
        "fine_tuning_job_id": public(JOB, job.id),
        "fine_tuned_model_checkpoint": f"{row.storage_key}",
        "step_number": row.step,
        "metrics": {"step": row.step, **row.metrics},
    }


def _lora(row: FineTuneJob) -> dict[str, Any]:
    keys = ("lora_r", "lora_alpha", "lora_dropout", "target_modules", "load_in_4bit")
    return {k: row.hyperparameters[k] for k in keys if k in row.hyperparameters}


def _eta(row: FineTuneJob) -> int | None:
    eta = row.progress.get("eta_s") if row.progress else None
    if eta is None or row.heartbeat_at is None:
        return None
    return int(row.heartbeat_at.timestamp() + eta)
