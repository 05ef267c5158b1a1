"""Two real vLLM CPU engines behind one API process: the engine serving a greedy stream is
killed (SIGKILL) after the first token, mid-answer and near the end, and the client still
reads the uninterrupted answer, billed once, from the other engine.

The same drill as test_sglang_failover.py (the set-up and the checks are shared:
tests/support/failover_api.py); the serving engine is the one whose metrics count a running
request. The answer is longer than SGLang's (1000 tokens): vLLM answers the development
model so fast that a 160-token answer had ended before every kill. Its prompt is one whose
greedy answer puts out text all along (about 6, 24, 44 and 78% of it after 100, 250, 500
and 800 of the 1000 tokens): after "Once upon a time" the development model's text ends
within 250 tokens, the tokens after it carry none, so cuts by the text the client had fell
early, and each continuation generated again every token since the last text. About 100 s, most of
it starting the engines; `pytest -s` prints each cut's gap.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from loraplex.serving.engines.launcher import EngineConfig
from loraplex.settings import Settings
from tests.support.failover_api import Drill, check_cut, failover_drill

pytestmark = pytest.mark.engine
TOKENS = 1000
PROMPT = "Tell me a story"
BASE = "loraplex-tiny-vllm-failover"
PORTS = (8114, 8115)  # the shared engines keep theirs (tests/support/engine.py)


@pytest.fixture(scope="module")
def drill(settings: Settings) -> Iterator[Drill]:
    with failover_drill(settings, "vllm", PORTS, BASE, TOKENS, PROMPT) as drill:
        yield drill


def _running(config: EngineConfig) -> float:
    """Requests the engine is running, from its own metrics."""
    metrics = httpx.get(f"{config.url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("vllm:num_requests_running")
    )


def _serving(configs: list[EngineConfig]) -> EngineConfig:
    """The engine whose scheduler is running a request now."""
    running = [config for config in configs if _running(config)]
    assert running, "no engine is running the stream"
    return running[0]


@pytest.mark.parametrize("cut", ["first", "mid", "near_end"])
def test_a_stream_whose_vllm_engine_is_killed_reads_as_the_uninterrupted_answer(
    drill: Drill, cut: str
) -> None:
    check_cut(drill, cut, _serving)
