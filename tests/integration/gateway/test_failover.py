"""A stream whose engine dies after the first token goes on from another engine: the client
reads one stream with the uninterrupted answer, its usage, and event ids that go on.

Two stand-in engines (tests/system/fake_engine.py) behind one API process: a `greedy`
prompt gets the same answer on both, and `die=N` makes whichever engine serves the stream
drop its connection after N tokens, as a killed engine does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from loraplex.bench.server import api_process
from loraplex.settings import Settings
from tests.integration.conftest import wait_in_rotation
from tests.integration.gateway.streams import Event, parse_events
from tests.support.failover_api import FailoverApi, chunks, finishes, set_up, text
from tests.support.lora_files import TINY_BASE
from tests.support.operators import operator_key
from tests.support.stand_in_engine import stand_in_engine

TOKENS = 20
PROMPT = f"greedy tokens={TOKENS} every=0.02"


@pytest.fixture(scope="module")
def pair(settings: Settings) -> Iterator[FailoverApi]:
    live = replace(settings, engine_health_interval_s=1.0)
    with (
        stand_in_engine(TINY_BASE.name, "left") as left,
        stand_in_engine(TINY_BASE.name, "right") as right,
        api_process(live.to_env()) as (url, _),
    ):
        operator = operator_key(settings, "failover")
        yield set_up(
            url, operator, [left, right], base=TINY_BASE, source="generated://", kind="vllm",
            tokens=TOKENS,
        )  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(pair: FailoverApi) -> list[Event]:
    """The answer no engine failure cut."""
    return pair.stream(pair.chat(PROMPT))


@pytest.mark.parametrize("cut_after", [1, TOKENS // 2, TOKENS - 1])
def test_a_stream_cut_by_its_engine_reads_as_the_uninterrupted_answer(
    pair: FailoverApi, uninterrupted: list[Event], cut_after: int
) -> None:
    events = pair.stream(pair.chat(f"{PROMPT} die={cut_after}"))
    assert text(events) == text(uninterrupted) != ""
    assert finishes(events) == ["length"] and events[-1].data == "[DONE]"
    usage = chunks(events)[-1]["usage"]
    assert usage == chunks(uninterrupted)[-1]["usage"]  # each token billed once
    assert usage["completion_tokens"] == TOKENS


def test_a_resumable_stream_resumes_across_the_failover(
    pair: FailoverApi, uninterrupted: list[Event]
) -> None:
    body = pair.chat(f"{PROMPT} die=5", stream_options={"resumable": True, "include_usage": True})
    wait_in_rotation(pair.url, pair.ops, pair.engines)
    first: list[Event] = []
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{pair.url}/v1/chat/completions", json=body, headers=pair.auth) as r,
    ):
        received = b""
        for raw in r.iter_raw():
            received += raw
            first = parse_events(received.rsplit(b"\n\n", 1)[0] + b"\n\n")
            if len(first) >= 3:  # before the cut; the client drops here
                break
    time.sleep(1.0)  # the engine dies and the answer goes on meanwhile
    completion_id = first[0].json()["id"]
    rest = parse_events(
        httpx.get(
            f"{pair.url}/v1/chat/completions/{completion_id}/events",
            headers={**pair.auth, "Last-Event-ID": str(first[-1].id)},
            timeout=60,
        ).content
    )
    ids = [e.id for e in first + rest if e.id is not None]
    assert ids == list(range(ids[0], ids[0] + len(ids))), "event ids skip or repeat"
    assert text(first) + text(rest) == text(uninterrupted)
    assert finishes(first + rest) == ["length"]


def test_a_whole_chat_answer_is_continued_invisibly(
    pair: FailoverApi, uninterrupted: list[Event]
) -> None:
    wait_in_rotation(pair.url, pair.ops, pair.engines)
    body = {**pair.chat(f"{PROMPT} die={TOKENS // 2}"), "stream": False}
    body.pop("stream_options")
    reply = httpx.post(f"{pair.url}/v1/chat/completions", json=body, headers=pair.auth, timeout=60)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == (
        text(uninterrupted),
        "length",
    )
    assert reply.json()["usage"]["completion_tokens"] == TOKENS


def test_a_responses_answer_is_continued_invisibly(
    pair: FailoverApi, uninterrupted: list[Event]
) -> None:
    wait_in_rotation(pair.url, pair.ops, pair.engines)
    body = {
        "model": TINY_BASE.name,
        "input": f"{PROMPT} die={TOKENS // 2}",
        "max_output_tokens": TOKENS,
        "temperature": 0,
    }
    reply = httpx.post(f"{pair.url}/v1/responses", json=body, headers=pair.auth, timeout=60)
    assert reply.status_code == 200, reply.text
    texts = [
        part["text"]
        for item in reply.json()["output"]
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    ]
    assert texts == [text(uninterrupted)]
    assert reply.json()["usage"]["output_tokens"] == TOKENS
