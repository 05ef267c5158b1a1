"""Fine-tuning: streaming validation of OpenAI-format training files."""

from loraplex.finetune.datasets import (
    DatasetRejected,
    DatasetStats,
    JsonlValidator,
    LineError,
    validate_jsonl,
)
from loraplex.finetune.rows import Method

__all__ = [
    "DatasetRejected",
    "DatasetStats",
    "JsonlValidator",
    "LineError",
    "Method",
    "validate_jsonl",
]
