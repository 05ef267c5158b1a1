"""Two real SGLang engines behind one API process: the engine serving a greedy stream is
killed (SIGKILL) after the first token, mid-answer and near the end, and the client still
reads the uninterrupted answer, billed once, from the other engine.

The two engines are started here under their own base-model name, so the gateway routes
these streams only to them (the session's shared engine stays out of it and up). The
serving engine is the one SGLang's scheduler says is running a request; a killed engine is
started again before the next cut, so every cut has an engine to go on on.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from loraplex.serving.engines.launcher import EngineConfig
from loraplex.settings import Settings
from tests.support.failover_api import Drill, check_cut, failover_drill

pytestmark = pytest.mark.engine
TOKENS = 160
BASE = "loraplex-tiny-failover"
PORTS = (8104, 8105)  # the shared engines keep theirs (tests/support/engine.py)


@pytest.fixture(scope="module")
def drill(settings: Settings) -> Iterator[Drill]:
    with failover_drill(settings, "sglang", PORTS, BASE, TOKENS) as drill:
        yield drill


def _serving(configs: list[EngineConfig]) -> EngineConfig:
    """The engine whose scheduler is running a request now."""
    for config in configs:
        loads = httpx.get(f"{config.url}/v1/loads", timeout=5).json()["loads"]
        if sum(rank["num_running_reqs"] for rank in loads):
            return config
    raise AssertionError("no engine is running the stream")


@pytest.mark.parametrize("cut", ["first", "mid", "near_end"])
def test_a_stream_whose_sglang_engine_is_killed_reads_as_the_uninterrupted_answer(
    drill: Drill, cut: str
) -> None:
    check_cut(drill, cut, _serving)
