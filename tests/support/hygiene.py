"""What an error a client receives must never carry: internal addresses, URLs, ports,
exception class names or traceback text. Internal detail goes to the log with the request
id; the client gets the id.

`leaks(text)` names what a body gives away. `check_error_body` is an httpx response hook:
the suite's in-process client runs it on every 4xx and 5xx, so any test whose request ends
in an error checks that error too.
"""

from __future__ import annotations

import re

import httpx

LEAKS = [
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"), "an IP address"),
    (re.compile(r"\b(?:localhost|[\w-]+\.(?:internal|local|svc|cluster\.local))\b"), "a host name"),
    (re.compile(r"\b[a-z][a-z+.-]*://", re.IGNORECASE), "a URL"),
    # host:8100, [::1]:8100, "port 6379"; not a clock's 03:44:30 nor JSON's "status":409
    (re.compile(r"(?<=[A-Za-z0-9\]]):\d{4,5}\b|\bport \d{2,5}\b"), "a port"),
    (re.compile(r"\b[A-Z][A-Za-z]+(?:Error|Exception|Timeout)\b"), "an exception class name"),
    (re.compile(r"Traceback \(most recent call last\)|\bFile \"/"), "traceback text"),
]


def leaks(text: str) -> list[str]:
    """What `text` gives away, one line per kind with the first match."""
    return [f"{what}: {m.group(0)!r}" for pattern, what in LEAKS if (m := pattern.search(text))]


def _skipped(response: httpx.Response) -> bool:
    """Successes, and streams (their error events are checked where streams are read)."""
    streamed = response.headers.get("content-type", "").startswith("text/event-stream")
    return response.status_code < 400 or streamed


async def check_error_body(response: httpx.Response) -> None:
    """Fail the request's test when an error body gives away an internal detail."""
    if _skipped(response):
        return
    await response.aread()
    _assert_clean(response)


def check_error_body_sync(response: httpx.Response) -> None:
    """`check_error_body` for a synchronous client."""
    if _skipped(response):
        return
    response.read()
    _assert_clean(response)


def loraplex_key_in(request: httpx.Request) -> bool:
    """Whether the request carries a Loraplex API key (it went to the platform, not straight
    to an engine)."""
    return request.headers.get("authorization", "").startswith("Bearer lpx_")


def _assert_clean(response: httpx.Response) -> None:
    found = leaks(response.text)
    assert not found, (
        f"{response.request.method} {response.request.url.path} answered "
        f"{response.status_code} with {found}: {response.text[:300]}"
    )
