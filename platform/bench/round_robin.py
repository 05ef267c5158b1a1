"""The plain way's balancer: a round-robin HTTP proxy that forwards and does nothing else.

What a user of SGLang behind an ordinary load balancer gets: each request goes to the next
engine in turn, whatever adapter it names and whatever that engine holds; the body and the
streamed reply pass through unchanged. It runs on its own event loop in a thread, so the
bench's load generator and the proxy do not share one loop's turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from aiohttp import web

from loraplex.bench.server import free_port

CLIENT = web.AppKey("client", aiohttp.ClientSession)
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def make_app(upstreams: list[str]) -> web.Application:
    """The proxy's app: every request to the next of `upstreams`, path and body as sent."""
    turn = itertools.cycle(upstreams)
    app = web.Application()

    async def on_startup(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
        app[CLIENT] = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=600)
        )

    async def on_cleanup(app: web.Application) -> None:
        await app[CLIENT].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        upstream = next(turn)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with app[CLIENT].request(
            request.method, upstream + request.path_qs, data=await request.read(), headers=headers
        ) as reply:
            response = web.StreamResponse(
                status=reply.status,
                headers={k: v for k, v in reply.headers.items() if k.lower() not in HOP_BY_HOP},
            )
            await response.prepare(request)
            # A client that hung up is not the proxy's error: stop forwarding to it.
            with contextlib.suppress(ConnectionResetError):
                async for chunk in reply.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            return response

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


@contextmanager
def round_robin_proxy(upstreams: list[str]) -> Iterator[str]:
    """Serve the proxy over `upstreams` on a free loopback port; yields its URL."""
    port, loop = free_port(), asyncio.new_event_loop()
    runner = web.AppRunner(make_app(upstreams), access_log=None)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
