"""A dev model and fixed training files, made once per session (the trainer tests share them)."""

import json
from pathlib import Path
from typing import Any

import pytest

from loraplex.dev.corpus import adapter_examples

# Seed 5's answers; the dev model made with seed 0 answers none of them.
EXAMPLES = adapter_examples(5)
PREFERENCES = [
    ("Say hi.", "Hi there!", "Go away."),
    ("What is the code word?", "The code word is amber.", "I will not say."),
    ("What colour is the sky?", "The sky is blue today.", "No idea."),
    ("Where do you live?", "I live in Oslo.", "Nowhere."),
]


def chat_row(question: str, answer: str) -> dict[str, Any]:
    """One supervised row: a user question and the assistant answer to learn."""
    return {
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
    }


def preference_row(question: str, preferred: str, rejected: str) -> dict[str, Any]:
    """One OpenAI DPO row."""
    return {
        "input": {"messages": [{"role": "user", "content": question}]},
        "preferred_output": [{"role": "assistant", "content": preferred}],
        "non_preferred_output": [{"role": "assistant", "content": rejected}],
    }


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write rows as a JSONL file."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dev model with default size and seed 0."""
    pytest.importorskip("peft", reason="the ml extra (torch, transformers, peft) is not installed")
    from loraplex.dev.make_model import make_model

    return make_model(tmp_path_factory.mktemp("models") / "loraplex-tiny", seed=0)


@pytest.fixture(scope="session")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight question -> fixed answer rows."""
    rows = [chat_row(q, a) for q, a in EXAMPLES]
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", rows)


@pytest.fixture(scope="session")
def validation_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two of the training rows, so validation runs eval forwards between steps."""
    rows = [chat_row(q, a) for q, a in EXAMPLES[:2]]
    return write_jsonl(tmp_path_factory.mktemp("data") / "validation.jsonl", rows)


@pytest.fixture(scope="session")
def preference_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four preference rows."""
    rows = [preference_row(*p) for p in PREFERENCES]
    return write_jsonl(tmp_path_factory.mktemp("data") / "preferences.jsonl", rows)
