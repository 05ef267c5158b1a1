"""Resumable streams' lifetimes: an abandoned one stops its engine side, a long one stays
resumable; against the real Redis and the embedded mode's in-process stand-in (no engine)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.relay import encode_events
from loraplex.gateway.resume import ResumableStreams
from loraplex.gateway.sse import ChunkEncoder
from loraplex.redis_client import embedded_redis
from tests.conftest import REDIS_URL


@pytest.fixture(params=["redis", "embedded"])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    """The real Redis, then a fresh embedded stand-in."""
    client = Redis.from_url(REDIS_URL) if request.param == "redis" else embedded_redis()
    yield client
    await client.aclose()


async def test_nobody_reading_for_the_window_cancels_the_engine_side(redis: Redis) -> None:
    streams = ResumableStreams(redis, window_s=1.0, heartbeat_s=0.5)
    completion_id = f"cmpl-{uuid.uuid4().hex}"
    buffer = StreamBuffer(max_bytes=1 << 20)
    engine_stopped = asyncio.Event()

    async def engine_side() -> None:
        """Generates until cancelled, then ends the events as the gateway's pump does."""
        try:
            while True:
                buffer.push("token ")
                await asyncio.sleep(0.01)
        finally:
            buffer.fail("aborted", "the request was cancelled")
            engine_stopped.set()

    try:
        await streams.open(completion_id, uuid.uuid4())
        engine = asyncio.create_task(engine_side())
        events = encode_events(ChunkEncoder(completion_id, "m", "chat"), buffer, False, None)
        writer = asyncio.create_task(streams.write(completion_id, events, engine))
        # Nobody reads: the presence key lapses after 1 s, the watcher looks every second.
        await asyncio.wait_for(engine_stopped.wait(), timeout=5.0)
        await asyncio.wait_for(writer, timeout=5.0)  # and the copy into Redis ends too
        assert engine.cancelled()
    finally:
        await redis.delete(f"lpx:sse:{completion_id}", f"lpx:sse:{completion_id}:tenant")


async def test_a_generation_longer_than_its_first_ttl_stays_resumable(redis: Redis) -> None:
    # The owner record is first kept for 3 windows (0.9 s here); a reader follows the stream
    # for longer than that, drops, and resumes: the tenant still finds its stream.
    streams = ResumableStreams(redis, window_s=0.3, heartbeat_s=0.1)
    completion_id, tenant = f"cmpl-{uuid.uuid4().hex}", uuid.uuid4()
    buffer = StreamBuffer(max_bytes=1 << 20)

    async def engine_side() -> None:
        try:
            while True:
                buffer.push("token ")
                await asyncio.sleep(0.02)
        finally:
            buffer.fail("aborted", "the request was cancelled")

    async def follow(events: AsyncIterator[bytes], seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                async for _ in events:
                    pass

    engine = writer = None
    try:
        await streams.open(completion_id, tenant)
        engine = asyncio.create_task(engine_side())
        events = encode_events(ChunkEncoder(completion_id, "m", "chat"), buffer, False, None)
        writer = asyncio.create_task(streams.write(completion_id, events, engine))
        first = await streams.read(completion_id, tenant, None)
        await follow(first, 1.5)
        await first.aclose()
        again = await streams.read(completion_id, tenant, None)  # NotFound before the fix
        await again.aclose()
    finally:
        for task in (engine, writer):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (engine, writer) if t), return_exceptions=True)
        await redis.delete(f"lpx:sse:{completion_id}", f"lpx:sse:{completion_id}:tenant")
