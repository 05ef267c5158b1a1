"""The plain way's proxy sends each request to the next engine in turn and passes the
streamed reply through unchanged, so the bench's replay reads it as it reads an engine's."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import ExitStack

from loraplex.bench.adapters_replay import chat_body, replay
from loraplex.bench.adapters_trace import BenchRequest
from loraplex.bench.round_robin import round_robin_proxy
from tests.support.stand_in_engine import stand_in_engine

MODEL = "loraplex-fake"


def test_requests_go_to_the_engines_in_turn_and_their_streams_come_back_whole() -> None:
    with ExitStack() as stack:
        urls = [stack.enter_context(stand_in_engine(MODEL, name)) for name in ("left", "right")]
        proxy = stack.enter_context(round_robin_proxy(urls))
        requests = [BenchRequest(0.01 * i, 0, "q", "tokens=3 every=0", False) for i in range(6)]
        answers, _ = asyncio.run(
            replay(f"{proxy}/v1/chat/completions", requests, lambda r: ({}, chat_body(MODEL, r, 3)))
        )
    assert all(a.ok for a in answers), [a.error for a in answers]
    assert Counter(a.text.split()[0] for a in answers) == {"left": 3, "right": 3}
    assert all(a.text.split() == [a.text.split()[0]] * 3 for a in answers)
    assert all(0 < a.ttft_s <= a.e2e_s for a in answers)


def test_an_engines_refusal_passes_through_as_its_status() -> None:
    with stand_in_engine(MODEL) as url, round_robin_proxy([url]) as proxy:
        request = BenchRequest(0.0, 0, "q", "tokens=1", False)
        answers, _ = asyncio.run(
            replay(
                f"{proxy}/v1/chat/completions", [request], lambda r: ({}, chat_body("nope", r, 1))
            )
        )
    assert answers[0].error == "404"
