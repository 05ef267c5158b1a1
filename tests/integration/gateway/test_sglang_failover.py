"""Two real SGLang engines behind one API process: the engine serving a greedy stream is
killed (SIGKILL) after the first token, mid-answer and near the end, and the client still
reads the uninterrupted answer, billed once, from the other engine.

The two engines are started here under their own base-model name, so the gateway routes
these streams only to them (the session's shared engine stays out of it and up). The
serving engine is the one the API counts a request in flight on; a killed engine is
started again before the next cut, so every cut has an engine to go on on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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


@pytest.mark.parametrize("cut", ["first", "mid", "near_end"])
def test_a_stream_whose_sglang_engine_is_killed_reads_as_the_uninterrupted_answer(
    drill: Drill, cut: str
) -> None:
    check_cut(drill, cut)
