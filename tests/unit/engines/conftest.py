"""An in-memory engine for driver tests: scripted routes on httpx's MockTransport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

Handler = Callable[[httpx.Request], httpx.Response]
ENGINE_URL = "http://engine.test"


def sse(*events: Any) -> bytes:
    """An SSE body: each event JSON-encoded (bytes are sent as they are) on a `data:` line."""
    lines = []
    for event in events:
        payload = event if isinstance(event, bytes) else json.dumps(event).encode()
        lines.append(b"data: " + payload + b"\n\n")
    return b"".join(lines)


class HeldStream(httpx.AsyncByteStream):
    """A response body that sends `head` and then stays open until it is closed."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.closed = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.head
        await self.closed.wait()

    async def aclose(self) -> None:
        self.closed.set()


class FakeEngine:
    """Routes `(method, path)` to canned responses and records every request it gets."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, response: httpx.Response | Handler) -> None:
        """Answer `method path` with `response` (or with what a handler returns)."""
        self.routes[(method, path)] = response if callable(response) else (lambda _: response)

    def sent(self, path: str) -> Any:
        """The JSON body of the last request to `path`."""
        bodies = [r for r in self.requests if r.url.path == path]
        assert bodies, f"nothing was sent to {path}"
        return json.loads(bodies[-1].content)

    sse = staticmethod(sse)

    @staticmethod
    def held(head: bytes) -> HeldStream:
        """A stream body that sends `head` and stays open until closed."""
        return HeldStream(head)

    def paths(self) -> list[str]:
        """The paths requested, in order."""
        return [request.url.path for request in self.requests]

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        await request.aread()
        handler = self.routes.get((request.method, request.url.path))
        if handler is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        return handler(request)

    def client(self) -> httpx.AsyncClient:
        """An httpx client whose transport is this fake engine."""
        return httpx.AsyncClient(transport=httpx.MockTransport(self._handle), base_url=ENGINE_URL)


@pytest.fixture
def fake_engine() -> FakeEngine:
    """A fresh scripted engine."""
    return FakeEngine()
