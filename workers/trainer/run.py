"""`train`: one fine-tuning run, supervised or DPO, with progress, cancel and checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from loraplex.workers.trainer.config import Progress, TrainConfig, TrainResult
from loraplex.workers.trainer.model import torch_threads


def train(
    config: TrainConfig,
    *,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
    checkpoint: Callable[[Path, int], None] | None = None,
    resume_from: Path | None = None,
) -> TrainResult:
    """Train a LoRA adapter into `config.out_dir`; raise TrainingCancelled if stopped.

    `on_progress` gets a report after every step; `should_stop` is asked before every step;
    `checkpoint(folder, step)` gets each checkpoint folder to store elsewhere, and
    `resume_from` continues from such a folder (fetched back) after a lost worker.
    """
    # The caller's RNG is left as it was: the run seeds its own, so the same config and
    # seed train the same adapter whatever ran before in this process.
    with torch_threads(config.num_threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        if config.method == "dpo":
            from loraplex.workers.trainer.dpo import train_dpo

            return train_dpo(
                config,
                on_progress=on_progress,
                should_stop=should_stop,
                checkpoint=checkpoint,
                resume_from=resume_from,
            )
        from loraplex.workers.trainer.supervised import train_supervised

        return train_supervised(
            config,
            on_progress=on_progress,
            should_stop=should_stop,
            checkpoint=checkpoint,
            resume_from=resume_from,
        )
