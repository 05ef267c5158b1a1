"""Streams through the stand-in engines (fake_engine.py): start them in known states, and
read what each client saw at its end."""

from __future__ import annotations

import json
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from tests.system.cluster import FAKE_MODEL, Cluster
from tests.system.conftest import Tenant
from tests.system.drills import CHAT_PATH

PAST_FIRST_TOKEN = "tokens=40 every=0.1"  # 4 s of tokens: in flight when the fault hits
HELD_ON_ENGINE1 = "tokens=5 every=0.01 hold=engine1"  # engine1 never sends its first token


def chat(content: str, model: str = FAKE_MODEL) -> dict[str, Any]:
    """A streamed chat request (to the stand-ins' base model), paced by `content`."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 64,
        "stream": True,
    }


@dataclass
class InFlight:
    """Streams started through api1: some past their first token, some held by engine1."""

    past: list[Future[dict[str, Any]]]
    held: list[Future[dict[str, Any]]]
    engine1: dict[str, int]  # what engine1 held when the streams were in place


def streams_on_engine1(cluster: Cluster, tenant: Tenant, adapter: str) -> InFlight:
    """Start pairs of streams for `adapter`, which engine1 holds (placement sends them
    there), until engine1 holds one before and one past its first token."""
    client = cluster.client
    assert client is not None
    url = cluster.api_url("api1") + CHAT_PATH
    flight = InFlight([], [], {})
    for _ in range(4):
        for content, started in ((PAST_FIRST_TOKEN, flight.past), (HELD_ON_ENGINE1, flight.held)):
            body = chat(content, adapter)
            started.append(client.stream(url, headers=tenant.headers, json=body))
        time.sleep(0.3)
        flight.engine1 = cluster.engine_stats("engine1")
        if flight.engine1.get("held", 0) >= 1 and flight.engine1.get("streaming", 0) >= 1:
            return flight
    raise AssertionError(f"engine1 never held both kinds of stream: {flight.engine1}")


def outcome(result: dict[str, Any]) -> str:
    """What the client saw at the end of one stream."""
    events = result.get("events") or []
    if any(is_error(e) for e in events):
        return "error event"
    if events and events[-1] == "[DONE]":
        return "completed"
    return f"cut without an error event ({result.get('error')})"


def is_error(event: str) -> bool:
    """Whether an SSE payload is an error event."""
    return event.startswith("{") and "error" in json.loads(event)


def error_codes(result: dict[str, Any]) -> list[str]:
    """The codes of a stream's error events."""
    return [
        json.loads(e)["error"].get("code", "") for e in result.get("events") or [] if is_error(e)
    ]


def text(result: dict[str, Any]) -> str:
    """The text the client received on one stream."""
    received = ""
    for event in result.get("events") or []:
        if event.startswith("{") and not is_error(event):
            for choice in json.loads(event).get("choices") or []:
                received += (choice.get("delta") or {}).get("content") or ""
    return received


def served_by(result: dict[str, Any]) -> set[str]:
    """Which engine hosts the stream's tokens came from (each token is the host's name)."""
    return set(text(result).split())


def tokens_received(result: dict[str, Any]) -> int:
    """Tokens the client got (the stand-in sends one word per token)."""
    return len(text(result).split())
