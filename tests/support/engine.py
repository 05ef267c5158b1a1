"""The session's engines, started (or reused) through the launcher, one process per role.

SGLang is the production engine and the default; vLLM is the other supported driver. Each
engine has its own port and state dir, so a session can run both kinds at once, and an
engine started by `loraplex engine start` with the same port and state dir is reused.
An engine this session started is stopped at the end unless `LORAPLEX_KEEP_ENGINE=1`; an
engine that was already running is left alone.

Register the fixtures in a conftest with `from tests.support.engine import ...`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from loraplex.serving.engines.launcher import EngineConfig, start_engine, stop_engine

KINDS = ("sglang", "vllm")


@dataclass(frozen=True, slots=True)
class RunningEngine:
    """What a test needs to reach the engine and make adapters for its model."""

    url: str
    model_dir: Path
    served_model: str
    kind: str
    max_lora_rank: int
    gpu_slots: int
    host_slots: int
    state_dir: Path


# role -> (kind, port, state dir, max LoRA rank): the shared engines of a test session.
ROLES = {
    "sglang": ("sglang", 8100, "var/engine", 64),
    "sglang-r16": ("sglang", 8103, "var/engine-r16", 16),
    "vllm": ("vllm", 8110, "var/engine-vllm", 64),
}


def engine_config(role: str, **changes: object) -> EngineConfig:
    """The launcher config of a shared engine; `LORAPLEX_TEST_PORT_<ROLE>` moves its port."""
    kind, port, state_dir, rank = ROLES[role]
    variable = f"LORAPLEX_TEST_PORT_{role.upper().replace('-', '_')}"
    config = EngineConfig(
        kind=kind,
        port=int(os.environ.get(variable, port)),
        state_dir=Path(state_dir),
        max_lora_rank=rank,
    )
    return replace(config, **changes)  # type: ignore[arg-type]


@contextmanager
def running_engine(config: EngineConfig, label: str = "engine") -> Iterator[RunningEngine]:
    """Start or reuse the engine for `config`; stop it afterwards only if started here."""
    info = start_engine(config, say=lambda line: print(f"[{label}] {line}"))
    try:
        yield RunningEngine(
            info.url,
            Path(info.model_dir),
            info.served_model,
            config.kind,
            config.max_lora_rank,
            config.max_loras,
            config.max_cpu_loras,
            config.state_dir,
        )
    finally:
        if not info.reused and os.environ.get("LORAPLEX_KEEP_ENGINE") != "1":
            stop_engine(config)


@pytest.fixture(scope="session")
def sglang_engine() -> Iterator[RunningEngine]:
    """The session's SGLang engine (rank class 64), with LoRA enabled."""
    with running_engine(engine_config("sglang"), "sglang") as engine:
        yield engine


@pytest.fixture(scope="session")
def vllm_engine() -> Iterator[RunningEngine]:
    """The session's vLLM CPU engine, with LoRA enabled."""
    with running_engine(engine_config("vllm"), "vllm") as engine:
        yield engine


@pytest.fixture(scope="session")
def engine_of(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """`engine_of(kind)`: the session's engine of that kind, started on first use."""

    def get(kind: str) -> RunningEngine:
        return request.getfixturevalue(f"{kind}_engine")

    return get
