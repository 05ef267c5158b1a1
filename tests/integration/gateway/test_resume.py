"""Resumable streams: a dropped client resumes from Last-Event-ID without gaps or duplicates."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.integration.conftest import BASE, Served
from tests.integration.gateway.streams import parse_events
from tests.support.engine_metrics import wait_until_idle

pytestmark = pytest.mark.engine


@pytest.fixture
def served(served_each: Served) -> Served:
    """Every test here runs on each engine kind (SGLang, vLLM)."""
    return served_each


BODY = {
    "model": BASE,
    "messages": [{"role": "user", "content": "Once upon a time"}],
    "temperature": 0,
    "stream": True,
}


def _text(events: list) -> str:
    out = []
    for event in events:
        if event.data == "[DONE]":
            continue
        choices = event.json().get("choices") or []
        out.extend(c["delta"].get("content", "") for c in choices)
    return "".join(out)


def _first_events(served: Served, body: dict, count: int) -> list:
    events = []
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST", f"{served.url}/v1/chat/completions", json=body, headers=served.headers()
        ) as response,
    ):
        buffer = b""
        for chunk in response.iter_raw():
            buffer += chunk
            events = (
                parse_events(buffer.rsplit(b"\n\n", 1)[0] + b"\n\n") if b"\n\n" in buffer else []
            )
            if len(events) >= count:
                break
    return events[:count]


def test_a_dropped_stream_resumes_after_the_last_event_without_duplicates(served: Served) -> None:
    body = {**BODY, "model": served.base, "max_tokens": 60, "stream_options": {"resumable": True}}
    first = _first_events(served, body, 6)
    completion_id, last_id = first[0].json()["id"], first[-1].id
    response = httpx.get(
        f"{served.url}/v1/chat/completions/{completion_id}/events",
        timeout=60,
        headers={**served.headers(), "Last-Event-ID": str(last_id)},
    )
    rest = parse_events(response.content)
    assert rest[-1].data == "[DONE]"
    ids = [e.id for e in first + rest if e.id is not None]
    assert ids == sorted(set(ids)), "events were duplicated or reordered"
    assert ids == list(range(ids[0], ids[0] + len(ids))), "events are missing"
    whole = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={**BODY, "model": served.base, "max_tokens": 60, "stream": False},
        headers=served.headers(),
        timeout=60,
    ).json()["choices"][0]["message"]["content"]
    assert _text(first) + _text(rest) == whole


def test_an_abandoned_resumable_stream_is_aborted_after_the_window(served: Served) -> None:
    body = {**BODY, "model": served.base, "max_tokens": 3000, "stream_options": {"resumable": True}}
    first = _first_events(served, body, 3)
    started = time.monotonic()
    idle_after = wait_until_idle(served.engines, 20)
    assert idle_after is not None, "the engine kept generating for nobody"
    assert time.monotonic() - started >= 2.0  # it waited for a resumer first (window: 3 s)
    response = httpx.get(
        f"{served.url}/v1/chat/completions/{first[0].json()['id']}/events",
        headers=served.headers(),
        timeout=10,
    )
    # The owner record outlives the window (it is kept for 3x the window from the start),
    # so the resume is answered; but the generation was aborted and its events dropped, so
    # all it replays is the `aborted` error the engine side ended with, never a [DONE].
    assert response.status_code == 200, response.text
    rest = parse_events(response.content)
    assert rest, "the resume replayed nothing, not even how the stream ended"
    assert all(e.data != "[DONE]" for e in rest), "the abandoned generation was completed"
    assert rest[-1].json()["error"]["code"] == "aborted"


def test_another_tenant_cannot_resume_a_stream(served: Served) -> None:
    body = {**BODY, "model": served.base, "max_tokens": 20, "stream_options": {"resumable": True}}
    first = _first_events(served, body, 2)
    other = httpx.post(
        f"{served.url}/api/v1/tenants",
        json={"slug": f"r{time.time_ns() % 10**8}", "name": "r"},
        headers=served.operator(),
    ).json()
    key = httpx.post(
        f"{served.url}/api/v1/tenants/{other['id']}/api-keys",
        json={"name": "x", "scopes": ["inference"]},
        headers=served.operator(),
    ).json()["key"]
    response = httpx.get(
        f"{served.url}/v1/chat/completions/{first[0].json()['id']}/events",
        headers={"Authorization": f"Bearer {key}", "Last-Event-ID": "0"},
        timeout=10,
    )
    assert response.status_code == 404
