"""One small model and its adapters per test session: making them is the slow part."""

from pathlib import Path

import pytest

pytest.importorskip("peft", reason="the ml extra (torch, transformers, peft) is not installed")

from loraplex.dev.corpus import task_examples
from loraplex.dev.make_adapter import make_adapter
from loraplex.dev.make_model import make_model
from tests.support.trained import trained_adapter


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dev model made with the default size and seed 0."""
    return make_model(tmp_path_factory.mktemp("models") / "tiny-llama", seed=0)


@pytest.fixture(scope="session")
def trained_adapter_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rank-8 adapter trained on the seed-3 examples."""
    return make_adapter(model_dir, tmp_path_factory.mktemp("adapters") / "trained", 8, seed=3)


@pytest.fixture(scope="session")
def random_adapter_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rank-16 adapter with random weights."""
    out = tmp_path_factory.mktemp("adapters") / "random"
    return make_adapter(model_dir, out, 16, seed=1, random=True)


@pytest.fixture(scope="session")
def tools_adapter_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rank-8 adapter trained on the seed-0 tool calls, the tools in every prompt."""
    examples, tools = task_examples("tools", 0)
    out = tmp_path_factory.mktemp("adapters") / "tools"
    return trained_adapter(model_dir, out, rank=8, seed=0, examples=examples, tools=tools)
