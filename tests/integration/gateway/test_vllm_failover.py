"""Two real vLLM CPU engines behind one API process: the engine serving a greedy stream is
killed (SIGKILL) after the first token, mid-answer and near the end, and the client still
reads the uninterrupted answer, billed once, from the other engine.

The same drill as test_sglang_failover.py (the set-up and the checks are shared:
tests/support/failover_api.py), with the stream offered tools. The answer is longer than SGLang's (1000 tokens): vLLM answers the development
model so fast that a 160-token answer had ended before every kill. Its prompt is one whose
greedy answer puts out text all along (about 6, 24, 44 and 78% of it after 100, 250, 500
and 800 of the 1000 tokens): after "Once upon a time" the development model's text ends
within 250 tokens, the tokens after it carry none, so cuts by the text the client had fell
early, and each continuation generated again every token since the last text. About 100 s,
most of it starting the engines; `pytest -s` prints each cut's gap.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loraplex.settings import Settings
from tests.support.failover_api import Drill, check_cut, check_tools_cut, failover_drill

pytestmark = pytest.mark.engine
TOKENS = 1000
PROMPT = "Tell me a story"
BASE = "loraplex-tiny-vllm-failover"
PORTS = (8114, 8115)  # the shared engines keep theirs (tests/support/engine.py)


@pytest.fixture(scope="module")
def drill(settings: Settings) -> Iterator[Drill]:
    with failover_drill(settings, "vllm", PORTS, BASE, TOKENS, PROMPT) as drill:
        yield drill


@pytest.mark.parametrize("cut", ["first", "mid", "near_end"])
def test_a_stream_whose_vllm_engine_is_killed_reads_as_the_uninterrupted_answer(
    drill: Drill, cut: str
) -> None:
    check_cut(drill, cut)


def test_a_stream_offered_tools_whose_engine_is_killed_ends_as_docs_say(drill: Drill) -> None:
    check_tools_cut(drill)
