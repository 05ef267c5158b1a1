"""Checkpoint folders: adapter weights, optimizer and scheduler state, RNG state and the step.

A folder holds everything a fresh worker needs to continue the same run bit for bit: the
batch order is a pure function of the seed and the step, so no data position is stored.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file, save_file

STATE_FILE = "trainer_state.json"
WEIGHTS_FILE = "adapter_weights.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng_state.pt"


@dataclass(frozen=True)
class TrainingState:
    """Where a run stands after `step` steps."""

    step: int
    total_steps: int
    trained_tokens: int
    loss: float
    method: str
    seed: int


def save_checkpoint(
    folder: Path,
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: TrainingState,
) -> Path:
    """Write a checkpoint folder, replacing any folder of the same name."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    weights = {
        k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model).items()
    }
    save_file(weights, str(folder / WEIGHTS_FILE))
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
        folder / OPTIMIZER_FILE,
    )
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, folder / RNG_FILE)
    (folder / STATE_FILE).write_text(json.dumps(state.__dict__, indent=2) + "\n", encoding="utf-8")
    return folder


def load_checkpoint(
    folder: Path,
    model: PeftModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> TrainingState:
    """Restore a run from a checkpoint folder; return the state it was saved at."""
    state = read_state(folder)
    device = next(p.device for p in model.parameters() if p.requires_grad)
    set_peft_model_state_dict(model, load_file(str(folder / WEIGHTS_FILE), device=str(device)))
    saved: dict[str, Any] = torch.load(folder / OPTIMIZER_FILE, map_location=device)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    # weights_only=False: Python's random state is a tuple the safe unpickler refuses; the
    # folder is one this trainer wrote, fetched from the project's own object store.
    rng = torch.load(folder / RNG_FILE, weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return state


def read_state(folder: Path) -> TrainingState:
    """The step and totals recorded in a checkpoint folder."""
    data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    return TrainingState(**data)
