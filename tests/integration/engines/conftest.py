"""Fixtures for the engine driver tests against a real vLLM CPU engine."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loraplex.serving.engines import VllmDriver
from tests.support.engine import RunningEngine, vllm_engine

__all__ = ["vllm_engine"]


@pytest.fixture(scope="session")
def adapter_dirs(vllm_engine: RunningEngine, tmp_path_factory) -> dict[int, Path]:
    """Seeded random adapters for the engine's model, by rank; 128 is over the engine's max."""
    from loraplex.dev.make_adapter import make_adapter  # torch: only when these tests run

    root = tmp_path_factory.mktemp("adapters")
    return {
        rank: make_adapter(vllm_engine.model_dir, root / f"r{rank}", rank=rank, random=True,
                           seed=rank)
        for rank in (8, 16, 128)
    }  # fmt: skip


@pytest.fixture
async def driver(vllm_engine: RunningEngine) -> AsyncIterator[VllmDriver]:
    """A driver for the session's engine."""
    engine_driver = VllmDriver(vllm_engine.url)
    yield engine_driver
    await engine_driver.aclose()


@pytest.fixture
def adapter_name() -> str:
    """A fresh engine-side adapter name, as the gateway would make one per version."""
    return f"test-{uuid.uuid4().hex[:12]}"
