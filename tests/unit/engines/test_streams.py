"""The aiohttp generation transport against a real loopback HTTP server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from loraplex.serving.engines.streams import AiohttpStreams, Reply, StreamClosed, closed_on


async def blocks(reply: Reply) -> AsyncIterator[bytes]:
    """The body as the relay reads it, block by block; a broken connection raises
    `StreamClosed`, as `_read_stream` sees it."""
    with closed_on(reply.errors):
        while block := await reply.read_block():
            yield block


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[int], asyncio.Event]]:
    """A server whose /gen streams three blocks and /hold sends one and stays open.

    Yields its URL, the client ports it saw (one per TCP connection) and an event set when
    a held reply's client went away.
    """
    ports: list[int] = []
    client_left = asyncio.Event()

    async def gen(request: web.Request) -> web.StreamResponse:
        ports.append(request.transport.get_extra_info("peername")[1])
        response = web.StreamResponse()
        await response.prepare(request)
        for i in range(3):
            await response.write(b"data: %d\n\n" % i)
        await response.write_eof()
        return response

    async def hold(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"data: first\n\n")
        try:
            await asyncio.sleep(30)
        finally:
            client_left.set()
        return response

    app = web.Application()
    app.router.add_post("/gen", gen)
    app.router.add_post("/hold", hold)
    runner = web.AppRunner(app, handler_cancellation=True)  # notice a client leaving
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", ports, client_left
    await runner.cleanup()


def _streams(url: str) -> AiohttpStreams:
    return AiohttpStreams(url, connect_s=2, read_s=10, max_streams=8)


async def _body(streams: AiohttpStreams) -> bytes:
    reply = await streams.post("/gen", b"{}")
    body = [block async for block in blocks(reply)]
    await reply.close()
    return b"".join(body)


async def test_a_fully_read_reply_gives_its_connection_to_the_next_request(server):
    url, ports, _ = server
    streams = _streams(url)
    try:
        first, second = await _body(streams), await _body(streams)
    finally:
        await streams.aclose()
    assert first == second == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert len(ports) == 2 and ports[0] == ports[1], "the second request opened a new connection"


async def test_closing_a_reply_mid_stream_wakes_its_reader_and_disconnects(server):
    url, _, client_left = server
    streams = _streams(url)
    reply = await streams.post("/hold", b"{}")
    got: list[bytes] = []

    async def read() -> None:
        async for block in blocks(reply):
            got.append(block)

    reader = asyncio.create_task(read())
    while not got:
        await asyncio.sleep(0.01)
    await reply.close()  # what `abort(rid)` does
    try:
        with pytest.raises(StreamClosed):
            await asyncio.wait_for(reader, 2)
        await asyncio.wait_for(client_left.wait(), 2)  # the engine sees the disconnect
    finally:
        await streams.aclose()


async def test_an_unreachable_engine_is_a_stream_closed_error():
    streams = AiohttpStreams("http://127.0.0.1:9", connect_s=1, read_s=1, max_streams=1)
    try:
        with pytest.raises(StreamClosed):
            await streams.post("/gen", b"{}")
    finally:
        await streams.aclose()
