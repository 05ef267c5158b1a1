"""The fine-tuning trainer: LoRA/QLoRA supervised and DPO runs, no Celery or database.

`TrainConfig`, `Progress`, `TrainResult` and `TrainingCancelled` import without torch, so
the API can read defaults; `train` loads torch, transformers and PEFT on first use.
"""

from typing import TYPE_CHECKING, Any

from loraplex.workers.trainer.config import (
    BASE_LEARNING_RATE,
    Method,
    Progress,
    TrainConfig,
    TrainingCancelled,
    TrainResult,
)

if TYPE_CHECKING:
    from loraplex.workers.trainer.run import train

__all__ = [
    "BASE_LEARNING_RATE",
    "Method",
    "Progress",
    "TrainConfig",
    "TrainResult",
    "TrainingCancelled",
    "train",
]


def __getattr__(name: str) -> Any:
    """Import `train` (and with it torch) only when it is first used."""
    if name == "train":
        from loraplex.workers.trainer.run import train

        return train
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
