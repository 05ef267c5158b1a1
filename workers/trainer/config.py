"""What a training run takes and reports: plain dataclasses, importable without torch.

Defaults follow Axolotl's and Unsloth's LoRA recipes where they agree (r 16, alpha 16, all
seven linear projections, lr 2e-4, linear decay after a short warmup, AdamW with weight
decay 0.01, gradient clipping at 1.0); where they differ the choice is noted on the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from loraplex.adapters.facts import PROJECTION_MODULES

Method = Literal["supervised", "dpo"]

# Unsloth's and Axolotl's LoRA learning rate; OpenAI's `learning_rate_multiplier` scales it.
BASE_LEARNING_RATE = 2e-4
WARMUP_STEPS = 5  # Unsloth's notebooks; capped at a tenth of the run for tiny jobs
WEIGHT_DECAY = 0.01  # Unsloth (Axolotl uses 0.0); it barely matters at these step counts
MAX_GRAD_NORM = 1.0  # transformers' Trainer default, which both inherit
DPO_BETA = 0.1  # TRL's and OpenAI's default strength of the KL anchor to the base model


@dataclass(frozen=True)
class TrainConfig:
    """One fine-tuning run: data, base model, method and hyperparameters."""

    base_model_dir: Path
    train_path: Path
    out_dir: Path
    method: Method = "supervised"
    validation_path: Path | None = None
    n_epochs: int = 3  # Axolotl's examples use 1-4; OpenAI's "auto" picks about 3 for small sets
    batch_size: int = 8  # Unsloth's effective batch: 2 per device x 4 accumulation steps
    learning_rate_multiplier: float = 1.0
    lora_r: int = 16
    lora_alpha: float = 16
    lora_dropout: float = 0.05  # Axolotl's; Unsloth uses 0 for speed
    target_modules: tuple[str, ...] = PROJECTION_MODULES
    load_in_4bit: bool = True
    seed: int = 0
    max_steps: int | None = None
    checkpoint_dir: Path | None = None
    checkpoint_every: int = 50  # steps; a lost worker redoes at most this many
    max_length: int | None = None  # tokens per row; None: the base model's context length
    dpo_beta: float = DPO_BETA
    # 1 keeps float summation order, and so runs bit-reproducible; small models gain nothing
    # from more threads on shared CPUs (see loraplex.dev.reference.single_thread).
    num_threads: int | None = 1
    gradient_checkpointing: bool = False  # saves memory on big models; slows small ones

    @property
    def learning_rate(self) -> float:
        """The peak learning rate: the base rate times the multiplier."""
        return BASE_LEARNING_RATE * self.learning_rate_multiplier


@dataclass(frozen=True)
class Progress:
    """A progress report after a step; `eta_s` is None until a step's time is known."""

    step: int
    total_steps: int
    loss: float
    learning_rate: float
    tokens_per_s: float
    eta_s: float | None
    validation_loss: float | None = None


@dataclass(frozen=True)
class TrainResult:
    """The finished adapter and what it took; `quantized` is False when 4-bit fell back."""

    adapter_dir: Path
    steps: int
    trained_tokens: int
    final_loss: float
    quantized: bool
    fallback_reason: str | None = None
    validation_loss: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # e.g. DPO reward margins


class TrainingCancelled(Exception):
    """`should_stop()` returned True; training stopped before `step` and saved nothing."""

    def __init__(self, step: int) -> None:
        super().__init__(f"training cancelled before step {step}")
        self.step = step
