"""Fine-tuning plan limits as pure policy: each refusal names the limit it tripped."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loraplex.control.quotas import DEFAULT_PLANS, QUOTA_FIELDS, check_limits
from loraplex.finetune.limits import (
    CONCURRENT_JOBS,
    FINE_TUNE_LIMITS,
    MAX_RANK,
    MAX_STEPS,
    MAX_STORAGE,
    MIN_CHECKPOINT_EVERY,
    JobShape,
    check_concurrency,
    check_job,
    check_storage,
    job_shape,
    planned_steps,
    with_defaults,
)
from loraplex.finetune.schemas import AUTO, CHECKPOINT_EVERY, Hyperparameters
from loraplex.workers.trainer.config import TrainConfig
from loraplex.workers.trainer.supervised import BatchPlan  # imports torch: once, not per example

DEFAULT_HYPER = {k: getattr(Hyperparameters(), k) for k in Hyperparameters.__struct_fields__}
FREE = with_defaults("free", {})


def test_every_fine_tuning_limit_is_a_quota_an_operator_can_set() -> None:
    assert set(FINE_TUNE_LIMITS) <= set(QUOTA_FIELDS)
    assert check_limits({MAX_STEPS: 10, MIN_CHECKPOINT_EVERY: 50}) == {
        MAX_STEPS: 10,
        MIN_CHECKPOINT_EVERY: 50,
    }


@pytest.mark.parametrize("plan", sorted(DEFAULT_PLANS))
def test_every_shipped_plan_sets_every_fine_tuning_limit(plan: str) -> None:
    assert set(FINE_TUNE_LIMITS) <= set(DEFAULT_PLANS[plan])


def test_a_plan_row_without_the_new_keys_gets_its_shipped_plans_values() -> None:
    stored_before_the_keys_existed = {"max_rank": 16, "concurrent_fine_tunes": 1}
    limits = with_defaults("free", stored_before_the_keys_existed)
    assert limits[MAX_STEPS] == DEFAULT_PLANS["free"][MAX_STEPS]
    assert limits[MIN_CHECKPOINT_EVERY] == DEFAULT_PLANS["free"][MIN_CHECKPOINT_EVERY]


def test_an_operators_own_plan_is_never_unbounded_and_its_values_win() -> None:
    limits = with_defaults("startup", {MAX_STEPS: 7})
    assert limits[MAX_STEPS] == 7
    assert limits[MIN_CHECKPOINT_EVERY] == DEFAULT_PLANS["enterprise"][MIN_CHECKPOINT_EVERY]
    assert limits[MAX_RANK] == DEFAULT_PLANS["enterprise"][MAX_RANK]


def test_the_default_job_on_a_small_file_fits_every_shipped_plan() -> None:
    shape = job_shape(500, DEFAULT_HYPER, AUTO)
    for plan in DEFAULT_PLANS:
        assert check_job(with_defaults(plan, {}), shape) is None, plan


def test_a_rank_over_the_plan_is_refused_naming_max_rank() -> None:
    refusal = check_job(FREE, JobShape(lora_r=32, steps=10, checkpoint_every=CHECKPOINT_EVERY))
    assert refusal is not None and refusal.limit == MAX_RANK
    assert "lora_r 32" in refusal.message and "max_rank of 16" in refusal.message
    assert refusal.param == "hyperparameters.lora_r"


@pytest.mark.parametrize("plan", sorted(DEFAULT_PLANS))
def test_checkpoint_every_step_is_refused_on_every_shipped_plan(plan: str) -> None:
    shape = JobShape(lora_r=8, steps=10, checkpoint_every=1)
    refusal = check_job(with_defaults(plan, {}), shape)
    assert refusal is not None and refusal.limit == MIN_CHECKPOINT_EVERY
    assert "checkpoint_every 1" in refusal.message


def test_too_many_steps_is_refused_and_says_how_to_fit() -> None:
    hyper = {**DEFAULT_HYPER, "n_epochs": 100, "batch_size": 1}
    refusal = check_job(FREE, job_shape(100, hyper, AUTO))
    assert refusal is not None and refusal.limit == MAX_STEPS
    assert "10000 steps" in refusal.message and "fewer epochs" in refusal.message


def test_auto_hyperparameters_count_as_the_workers_auto_values() -> None:
    shape = job_shape(100, DEFAULT_HYPER, AUTO)
    assert shape.steps == planned_steps(100, AUTO["n_epochs"], AUTO["batch_size"]) == 39


@given(rows=st.integers(1, 5000), epochs=st.integers(1, 50), batch=st.integers(1, 256))
def test_planned_steps_are_the_trainers_total_steps(rows: int, epochs: int, batch: int) -> None:
    config = TrainConfig(
        base_model_dir=Path("m"),
        train_path=Path("t"),
        out_dir=Path("o"),
        n_epochs=epochs,
        batch_size=batch,
    )
    assert planned_steps(rows, epochs, batch) == BatchPlan(rows, config).total_steps


def test_the_concurrent_job_limit_refuses_only_when_full() -> None:
    assert check_concurrency({CONCURRENT_JOBS: 2}, 1) is None
    refusal = check_concurrency({CONCURRENT_JOBS: 2}, 2)
    assert refusal is not None and refusal.limit == CONCURRENT_JOBS
    assert check_concurrency({}, 1000) is None


def test_storage_counts_what_is_used_plus_what_is_new() -> None:
    limits = {MAX_STORAGE: 1000}
    assert check_storage(limits, 600, 400, "training file", "file") is None
    refusal = check_storage(limits, 600, 401, "training file", "file")
    assert refusal is not None and refusal.limit == MAX_STORAGE
    assert "training file (401 bytes)" in refusal.message and "600 used" in refusal.message
