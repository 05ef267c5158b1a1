"""How a driver sends a generation and reads its reply as it streams: aiohttp by default.

The generation stream is the gateway's hot path: every request opens one and every token
crosses it. httpx was measured there (py-spy, 64 streams on the vLLM CPU engine) spending
more than half of the gateway's CPU: h11 parses each chunk in pure Python, and httpcore's
pool scans every pooled connection with a `poll()` syscall on each request and each
release, so a wave of N streams costs O(N²) syscalls. aiohttp parses HTTP in C and hands a
connection out of its pool in O(1).

Control calls (load, unload, health, models, metrics) stay on httpx: they are rare, and
tests script them on httpx's MockTransport. A driver built with an injected httpx client
streams through that client too (`HttpxStreams`), so the contract tests run every
stream-parsing path without a server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from typing import Protocol

import aiohttp
import httpx

JSON_HEADERS = {"content-type": "application/json"}


class StreamClosed(Exception):
    """The connection broke while sending or reading a generation (engine died or aborted)."""


AIOHTTP_ERRORS = (aiohttp.ClientError, TimeoutError)  # TimeoutError: connect or sock_read
HTTPX_ERRORS = (httpx.HTTPError, httpx.StreamError)


@contextlib.contextmanager
def closed_on(errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Turn a client library's transport `errors` into `StreamClosed`."""
    try:
        yield
    except errors as exc:
        raise StreamClosed(repr(exc)) from exc


class Reply(Protocol):
    """An engine's answer to one generation, its body read as it arrives."""

    status: int

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What `read_block` raises when the connection breaks (the library's own errors)."""
        ...

    def read_block(self) -> Awaitable[bytes]:
        """The body's next network-sized block, b"" at its end: the client library's own
        awaitable, never a wrapper of ours, since each coroutine or generator layer costs
        every token a few µs (issue #50)."""
        ...

    async def read(self) -> bytes:
        """The whole body (error answers and non-streamed replies)."""
        ...

    async def close(self) -> None:
        """Give the connection back (read to the end) or drop it (cut short); idempotent."""
        ...


class Streams(Protocol):
    """Sends generations to one engine."""

    async def post(self, path: str, body: bytes) -> Reply:
        """POST a JSON body; the reply once its status line and headers arrived."""
        ...

    async def aclose(self) -> None:
        """Close the pool."""
        ...


class AiohttpStreams:
    """Generations over an aiohttp session: C parser, O(1) pool, one per engine."""

    def __init__(
        self,
        url: str,
        *,
        connect_s: float,
        read_s: float,
        max_streams: int,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self._headers = {**JSON_HEADERS, **(headers or {})}
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_s, sock_read=read_s)
        self._max_streams = max_streams
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session_now(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the event loop running when it is made
        # (a driver outliving its loop, as in tests, gets a new one in the next loop).
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._loop = loop
            connector = aiohttp.TCPConnector(
                limit=self._max_streams,
                # Shorter than the engines' own keep-alive (uvicorn's 5 s): reusing a
                # connection the engine just closed would look like a dead engine.
                keepalive_timeout=2.0,
            )
            self._session = aiohttp.ClientSession(
                self.url, connector=connector, timeout=self._timeout, auto_decompress=False
            )
        return self._session

    async def post(self, path: str, body: bytes) -> Reply:
        """POST `body`; connection errors become `StreamClosed`."""
        with closed_on(AIOHTTP_ERRORS):
            response = await self._session_now().post(path, data=body, headers=self._headers)
        return _AiohttpReply(response)

    async def aclose(self) -> None:
        """Close the session and its connections."""
        if self._session is not None and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None


class _AiohttpReply:
    errors: tuple[type[BaseException], ...] = AIOHTTP_ERRORS

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.read_block = response.content.readany  # iter_any() without its iterator

    async def read(self) -> bytes:
        with closed_on(AIOHTTP_ERRORS):
            return await self._response.read()

    async def close(self) -> None:
        # release() keeps a fully read connection for the next request and closes one
        # cut short; close() would drop both. A reader waiting on the body is woken
        # with an error either way.
        if self._response.content.is_eof():
            self._response.release()
        else:
            self._response.close()


class HttpxStreams:
    """Generations over an httpx client: tests inject a client with a mock transport."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def post(self, path: str, body: bytes) -> Reply:
        """POST `body`; transport errors become `StreamClosed`."""
        request = self._client.build_request("POST", path, content=body, headers=JSON_HEADERS)
        with closed_on(HTTPX_ERRORS):
            response = await self._client.send(request, stream=True)
        return _HttpxReply(response)

    async def aclose(self) -> None:
        """The client belongs to whoever injected it."""


class _HttpxReply:
    errors: tuple[type[BaseException], ...] = HTTPX_ERRORS

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self._blocks: AsyncIterator[bytes] | None = None

    async def read(self) -> bytes:
        with closed_on(HTTPX_ERRORS):
            return await self._response.aread()

    def read_block(self) -> Awaitable[bytes]:
        if self._blocks is None:
            self._blocks = self._response.aiter_bytes()
        return anext(self._blocks, b"")

    async def close(self) -> None:
        await self._response.aclose()
