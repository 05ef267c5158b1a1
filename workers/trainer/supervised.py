"""Supervised fine-tuning: LoRA on the assistant tokens of chat rows, one AdamW step a batch.

A plain loop rather than transformers' Trainer: the batch order is a pure function of the
seed and the step, which makes cancel, checkpoint and resume exact and easy to test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from peft import PeftModel
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from loraplex.workers.trainer.checkpoints import TrainingState, load_checkpoint, save_checkpoint
from loraplex.workers.trainer.config import (
    MAX_GRAD_NORM,
    WARMUP_STEPS,
    WEIGHT_DECAY,
    Progress,
    TrainConfig,
    TrainingCancelled,
    TrainResult,
)
from loraplex.workers.trainer.examples import TokenizedRow, collate, read_rows, tokenize_chat
from loraplex.workers.trainer.model import LoadedBase, load_base, save_adapter, with_lora
from loraplex.workers.trainer.progress import ProgressMeter

CheckpointCallback = Callable[[Path, int], None]


class BatchPlan:
    """Which rows each step trains on: a seeded shuffle per epoch, cut into batches."""

    def __init__(self, num_rows: int, config: TrainConfig) -> None:
        self.num_rows = num_rows
        self.batch_size = min(config.batch_size, num_rows)
        self.steps_per_epoch = math.ceil(num_rows / self.batch_size)
        planned = self.steps_per_epoch * config.n_epochs
        self.total_steps = min(planned, config.max_steps) if config.max_steps else planned
        self._seed = config.seed
        self._order: tuple[int, list[int]] = (-1, [])

    def rows_for(self, step: int) -> list[int]:
        """Row indices of 1-based `step`."""
        epoch, position = divmod(step - 1, self.steps_per_epoch)
        if self._order[0] != epoch:
            generator = torch.Generator().manual_seed(self._seed * 1_000_003 + epoch)
            self._order = (epoch, torch.randperm(self.num_rows, generator=generator).tolist())
        start = position * self.batch_size
        return self._order[1][start : start + self.batch_size]


def linear_schedule(total_steps: int) -> Callable[[int], float]:
    """Learning-rate factor: a short linear warmup, then linear decay towards zero."""
    warmup = min(WARMUP_STEPS, total_steps // 10)

    def factor(done: int) -> float:
        if done < warmup:
            return float((done + 1) / (warmup + 1))
        return float(max(0.0, (total_steps - done) / max(1, total_steps - warmup)))

    return factor


class SupervisedRun:
    """A model, its optimizer and the data of one supervised run."""

    def __init__(self, config: TrainConfig, loaded: LoadedBase) -> None:
        self.config = config
        self.loaded = loaded
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            config.base_model_dir
        )
        max_length = config.max_length or loaded.model.config.max_position_embeddings
        self.rows = _tokenized(self.tokenizer, config.train_path, max_length)
        self.validation = (
            _tokenized(self.tokenizer, config.validation_path, max_length)
            if config.validation_path
            else []
        )
        self.plan = BatchPlan(len(self.rows), config)
        self.model: PeftModel = with_lora(loaded.model, config)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            trainable, lr=config.learning_rate, weight_decay=WEIGHT_DECAY
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, linear_schedule(self.plan.total_steps)
        )
        self.device = next(p.device for p in trainable)

    def step(self, step: int) -> tuple[float, int]:
        """Train one batch; return its loss and the number of tokens it held."""
        batch = [self.rows[i] for i in self.plan.rows_for(step)]
        input_ids, labels, mask = (t.to(self.device) for t in collate(batch, self._pad_id))
        self.model.train()
        loss = self.model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad], MAX_GRAD_NORM
        )
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.item()), int(mask.sum().item())

    @torch.no_grad()
    def validation_loss(self) -> float | None:
        """Mean loss over the validation rows, or None without a validation file."""
        if not self.validation:
            return None
        self.model.eval()
        losses = []
        size = self.plan.batch_size
        for start in range(0, len(self.validation), size):
            batch = collate(self.validation[start : start + size], self._pad_id)
            input_ids, labels, mask = (t.to(self.device) for t in batch)
            losses.append(
                float(self.model(input_ids=input_ids, attention_mask=mask, labels=labels).loss)
            )
        self.model.train()
        return sum(losses) / len(losses)

    @property
    def learning_rate(self) -> float:
        """The learning rate the next step will use."""
        return float(self.scheduler.get_last_lr()[0])

    @property
    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)


def train_supervised(
    config: TrainConfig,
    *,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
    checkpoint: CheckpointCallback | None,
    resume_from: Path | None,
) -> TrainResult:
    """Run (or resume) a supervised LoRA run and save the adapter to `config.out_dir`."""
    run = SupervisedRun(config, load_base(config))
    state = TrainingState(0, run.plan.total_steps, 0, math.nan, config.method, config.seed)
    if resume_from is not None:
        state = _resume(run, resume_from)
    meter = ProgressMeter(run.plan.total_steps)
    for step in range(state.step + 1, run.plan.total_steps + 1):
        if should_stop():
            raise TrainingCancelled(step)
        learning_rate = run.learning_rate
        loss, tokens = run.step(step)
        state = TrainingState(
            step,
            run.plan.total_steps,
            state.trained_tokens + tokens,
            loss,
            config.method,
            config.seed,
        )
        is_checkpoint = _is_checkpoint_step(config, step, run.plan.total_steps)
        validation = run.validation_loss() if is_checkpoint else None
        on_progress(meter.step_done(step, loss, learning_rate, tokens, validation))
        if is_checkpoint:
            _checkpoint(run, state, checkpoint)
    return _finish(run, state)


def _resume(run: SupervisedRun, folder: Path) -> TrainingState:
    """Load a checkpoint, refusing one made by a different run."""
    state = load_checkpoint(folder, run.model, run.optimizer, run.scheduler)
    expected = (run.config.method, run.config.seed, run.plan.total_steps)
    if (state.method, state.seed, state.total_steps) != expected:
        raise ValueError(
            f"checkpoint {folder.name} is from another run: method {state.method}, seed "
            f"{state.seed}, {state.total_steps} steps; this run expects {expected}"
        )
    return state


def _is_checkpoint_step(config: TrainConfig, step: int, total_steps: int) -> bool:
    """Checkpoint every `checkpoint_every` steps, but not at the end: the adapter is saved."""
    every = config.checkpoint_every
    return (
        config.checkpoint_dir is not None and every > 0 and step % every == 0 and step < total_steps
    )


def _checkpoint(
    run: SupervisedRun, state: TrainingState, callback: CheckpointCallback | None
) -> None:
    """Write the step's checkpoint folder, hand it over, and drop the one before it."""
    assert run.config.checkpoint_dir is not None
    folder = run.config.checkpoint_dir / f"step-{state.step:06d}"
    save_checkpoint(folder, run.model, run.optimizer, run.scheduler, state)
    if callback is not None:
        callback(folder, state.step)
    for older in run.config.checkpoint_dir.glob("step-*"):
        if older.name < folder.name:
            _remove_tree(older)


def _finish(run: SupervisedRun, state: TrainingState) -> TrainResult:
    """Save the adapter and describe the run."""
    validation = run.validation_loss()
    adapter_dir = save_adapter(run.model, run.config.out_dir, run.config.base_model_dir)
    return TrainResult(
        adapter_dir=adapter_dir,
        steps=state.step,
        trained_tokens=state.trained_tokens,
        final_loss=state.loss,
        quantized=run.loaded.quantized,
        fallback_reason=run.loaded.fallback_reason,
        validation_loss=validation,
    )


def _tokenized(
    tokenizer: PreTrainedTokenizerBase, path: Path, max_length: int
) -> list[TokenizedRow]:
    """Tokenize every chat row of a JSONL file."""
    return [tokenize_chat(tokenizer, row["messages"], max_length) for row in read_rows(path)]


def _remove_tree(folder: Path) -> None:
    """Delete a local checkpoint folder that has been superseded."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
