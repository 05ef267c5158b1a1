"""One vLLM CPU engine for a whole test session, started (or reused) through the launcher.

Register the fixture in a conftest with `from tests.support.engine import vllm_engine`.
An engine this session started is stopped at the end unless `LORAPLEX_KEEP_ENGINE=1`; an
engine that was already running (say, `loraplex engine start`) is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from loraplex.serving.engines.launcher import EngineConfig, start_engine, stop_engine


@dataclass(frozen=True, slots=True)
class RunningEngine:
    """What a test needs to reach the engine and make adapters for its model."""

    url: str
    model_dir: Path
    served_model: str


def engine_config() -> EngineConfig:
    """The launcher's defaults; the port can be moved with `LORAPLEX_TEST_ENGINE_PORT`."""
    port = int(os.environ.get("LORAPLEX_TEST_ENGINE_PORT", EngineConfig().port))
    return EngineConfig(port=port)


@contextmanager
def running_engine(config: EngineConfig) -> Iterator[RunningEngine]:
    """Start or reuse the engine for `config`; stop it afterwards only if started here."""
    info = start_engine(config, say=lambda line: print(f"[engine] {line}"))
    try:
        yield RunningEngine(info.url, Path(info.model_dir), info.served_model)
    finally:
        if not info.reused and os.environ.get("LORAPLEX_KEEP_ENGINE") != "1":
            stop_engine(config)


@pytest.fixture(scope="session")
def vllm_engine() -> Iterator[RunningEngine]:
    """The session's vLLM CPU engine, with LoRA enabled."""
    with running_engine(engine_config()) as engine:
        yield engine
