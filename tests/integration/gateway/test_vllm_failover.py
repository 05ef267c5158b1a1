"""Two real vLLM CPU engines behind one API process: the engine serving a greedy stream is
killed (SIGKILL) after the first token, mid-answer and near the end, and the client still
reads the uninterrupted answer, billed once, from the other engine.

The same drill as test_sglang_failover.py (the set-up and the checks are shared:
tests/support/failover_api.py), and a stream offered tools, which is not continued. The answer is longer than SGLang's (1000 tokens): vLLM answers the development
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
from tests.support.failover_api import (
    Drill,
    check_cut,
    continued,
    failover_drill,
    stream_killing_at,
    text,
)

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


WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
}


def test_a_stream_offered_tools_whose_engine_is_killed_ends_as_docs_say(drill: Drill) -> None:
    """docs/failover.md: a request offered tools is not continued (a call cut mid-arguments
    would be parsed from its middle): the text so far, then the error event."""
    before = continued(drill.api, "tools")
    offered = {"tools": [WEATHER_TOOL], "tool_choice": "auto"}
    events, _, kill_index = stream_killing_at(drill, lambda read: len(text(read)) > 0, offered)
    error = events[-1].json()["error"]
    assert error["code"] == "engine_died", error
    assert "127.0.0.1" not in error["message"] and "http" not in error["message"]
    assert continued(drill.api, "tools") == before + 1
    assert text(events[:-1]) != ""  # the text sent before the cut stays the client's
    print(f"\nvllm, tools offered: cut after {kill_index} of {len(events)} events -> "
          f"{error['code']}")  # fmt: skip
