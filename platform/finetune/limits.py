"""Plan limits on fine-tuning, as pure policy: what a job may ask for and what a tenant may store.

Each check takes the tenant's limits and the numbers at hand and returns a `Refusal` naming the
limit it tripped (None when the request fits); `loraplex.finetune.refusals` turns a refusal into
a metric, an audit entry and a 403. Nothing here reads the database or the clock.

Plans are rows whose `limits` JSON predates some of these keys. A key a plan lacks takes the
value of the shipped plan of the same name (`DEFAULT_PLANS`), and, for a plan an operator made,
the most generous shipped plan's: fine-tuning is never unbounded, and no migration is needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loraplex.control.quotas import DEFAULT_PLANS

# The limits fine-tuning enforces, each a key of a plan's (or an override's) `limits`.
MAX_RANK = "max_rank"
MAX_STEPS = "max_fine_tune_steps"
MIN_CHECKPOINT_EVERY = "min_checkpoint_every"
CONCURRENT_JOBS = "concurrent_fine_tunes"
MAX_STORAGE = "max_storage_bytes"
FINE_TUNE_LIMITS = (MAX_RANK, MAX_STEPS, MIN_CHECKPOINT_EVERY, CONCURRENT_JOBS, MAX_STORAGE)
FALLBACK_PLAN = "enterprise"  # defaults for a plan not shipped with Loraplex


@dataclass(frozen=True)
class Refusal:
    """A limit a request tripped: the limit's name, a message for the client, the field."""

    limit: str
    message: str
    param: str


@dataclass(frozen=True)
class JobShape:
    """What a job asks of the trainer, as the plan limits measure it."""

    lora_r: int
    steps: int
    checkpoint_every: int


def with_defaults(plan_name: str, limits: Mapping[str, int]) -> dict[str, int]:
    """`limits` with every fine-tuning key a plan lacks filled in from the shipped plans."""
    shipped = DEFAULT_PLANS.get(plan_name, DEFAULT_PLANS[FALLBACK_PLAN])
    defaults = {key: shipped[key] for key in FINE_TUNE_LIMITS if key in shipped}
    return {**defaults, **limits}


def planned_steps(rows: int, n_epochs: int, batch_size: int) -> int:
    """The optimizer steps a run takes: the trainer's batches per epoch times the epochs."""
    if rows <= 0:
        return 0
    return math.ceil(rows / min(batch_size, rows)) * n_epochs


def job_shape(rows: int, hyperparameters: Mapping[str, Any], auto: Mapping[str, int]) -> JobShape:
    """The shape of a job from its training rows and merged hyperparameters ("auto" resolved)."""

    def value(name: str) -> int:
        given = hyperparameters.get(name, "auto")
        return int(auto[name] if given == "auto" else given)

    return JobShape(
        lora_r=int(hyperparameters["lora_r"]),
        steps=planned_steps(rows, value("n_epochs"), value("batch_size")),
        checkpoint_every=int(hyperparameters["checkpoint_every"]),
    )


def check_job(limits: Mapping[str, int], shape: JobShape) -> Refusal | None:
    """The first plan limit the job's rank, steps or checkpoint interval is over, if any."""
    rank = limits.get(MAX_RANK)
    if rank is not None and shape.lora_r > rank:
        return Refusal(
            MAX_RANK,
            f"lora_r {shape.lora_r} is over the plan's {MAX_RANK} of {rank}",
            "hyperparameters.lora_r",
        )
    steps = limits.get(MAX_STEPS)
    if steps is not None and shape.steps > steps:
        return Refusal(
            MAX_STEPS,
            f"the job would train {shape.steps} steps (epochs x rows / batch size), over the "
            f"plan's {MAX_STEPS} of {steps}: use fewer epochs, fewer rows or a larger batch",
            "hyperparameters.n_epochs",
        )
    every = limits.get(MIN_CHECKPOINT_EVERY)
    if every is not None and shape.checkpoint_every < every:
        return Refusal(
            MIN_CHECKPOINT_EVERY,
            f"checkpoint_every {shape.checkpoint_every} is under the plan's "
            f"{MIN_CHECKPOINT_EVERY} of {every} steps",
            "hyperparameters.checkpoint_every",
        )
    return None


def check_concurrency(limits: Mapping[str, int], active: int) -> Refusal | None:
    """A refusal when `active` queued or running jobs already fill the plan's limit."""
    limit = limits.get(CONCURRENT_JOBS)
    if limit is None or active < limit:
        return None
    return Refusal(
        CONCURRENT_JOBS,
        f"the plan's {CONCURRENT_JOBS} is {limit} and {active} jobs are queued or running: "
        "wait for one to finish or cancel one",
        "model",
    )


def check_storage(
    limits: Mapping[str, int], used: int, new_bytes: int, what: str, param: str
) -> Refusal | None:
    """A refusal when storing `new_bytes` of `what` would take the tenant over its storage."""
    limit = limits.get(MAX_STORAGE)
    if limit is None or used + new_bytes <= limit:
        return None
    return Refusal(
        MAX_STORAGE,
        f"storing this {what} ({new_bytes} bytes) would exceed the plan's {MAX_STORAGE} of "
        f"{limit} bytes ({used} used by adapter versions, training files and checkpoints)",
        param,
    )
