"""Fixtures for the engine driver tests: each test runs against a real SGLang and vLLM engine."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from loraplex.serving.engines import EngineDriver, make_driver
from tests.support.engine import (  # noqa: F401 - fixtures
    KINDS,
    RunningEngine,
    engine_of,
    sglang_engine,
    vllm_engine,
)


@pytest.fixture(params=KINDS)
def engine(request: pytest.FixtureRequest, engine_of: Callable[[str], RunningEngine]):
    """The session's engine of each kind in turn."""
    return engine_of(request.param)


@pytest.fixture(scope="session")
def adapter_dirs(sglang_engine: RunningEngine, tmp_path_factory) -> dict[int, Path]:
    """Seeded random adapters for the engines' model, by rank; 128 is over the engines' max."""
    from loraplex.dev.make_adapter import make_adapter  # torch: only when these tests run

    root = tmp_path_factory.mktemp("adapters")
    return {
        rank: make_adapter(sglang_engine.model_dir, root / f"r{rank}", rank=rank, random=True,
                           seed=rank)
        for rank in (8, 16, 128)
    }  # fmt: skip


@pytest.fixture
async def driver(engine: RunningEngine) -> AsyncIterator[EngineDriver]:
    """A driver for the engine under test."""
    engine_driver = make_driver(engine.kind, engine.url)
    yield engine_driver
    await engine_driver.aclose()


@pytest.fixture
def adapter_name() -> str:
    """A fresh engine-side adapter name, as the gateway would make one per version."""
    return f"test-{uuid.uuid4().hex[:12]}"
