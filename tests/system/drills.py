"""What every drill checks the same way: clean errors, polling for recovery, summaries."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests.support.hygiene import leaks

CHAT_PATH = "/v1/chat/completions"


def error_code(reply: dict[str, Any]) -> str | None:
    """The `code` of an OpenAI or problem+json error body, if the reply has one."""
    try:
        body = json.loads(reply.get("text") or "")
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    inner = body.get("error", body)
    if not isinstance(inner, dict):
        return None
    problem_type = str(inner.get("type") or "")  # problem+json: urn:loraplex:problem:<code>
    return inner.get("code") or problem_type.rpartition(":")[2] or None


def assert_clean_error(reply: dict[str, Any]) -> None:
    """An error the client received names no host, address, port or exception."""
    assert reply.get("status") is not None, f"transport error: {reply}"
    found = leaks(reply.get("text") or "")
    assert not found, f"{reply['status']} gives away {found}: {reply.get('text', '')[:300]}"


def wait_until(
    ok: Callable[[], bool], timeout_s: float, every_s: float = 0.1, what: str = "recovered"
) -> float:
    """Seconds until `ok()` held (polled every `every_s`); fails after `timeout_s`."""
    started = time.monotonic()
    while not ok():
        assert time.monotonic() - started < timeout_s, f"not {what} within {timeout_s}s"
        time.sleep(every_s)
    return time.monotonic() - started


def summary(replies: list[dict[str, Any]]) -> str:
    """`503 service_unavailable x6`-style counts of what the client saw."""
    counts: dict[str, int] = {}
    for reply in replies:
        key = f"{reply.get('status')} {error_code(reply) or ''}".strip()
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{key} x{n}" for key, n in counts.items())
