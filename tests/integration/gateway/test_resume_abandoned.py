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


async def _generate_until_cancelled(buffer: StreamBuffer, stopped: asyncio.Event) -> None:
    """The engine side: a token every 10 ms until cancelled, then the events end as the
    gateway's pump ends them, and `stopped` is set."""
    try:
        while True:
            buffer.push("token ")
            await asyncio.sleep(0.01)
    finally:
        buffer.fail("aborted", "the request was cancelled")
        stopped.set()


async def test_nobody_reading_for_the_window_cancels_the_engine_side(redis: Redis) -> None:
    streams = ResumableStreams(redis, window_s=1.0, heartbeat_s=0.5)
    completion_id, tenant = f"cmpl-{uuid.uuid4().hex}", uuid.uuid4()
    buffer = StreamBuffer(max_bytes=1 << 20)
    engine_stopped = asyncio.Event()
    try:
        await streams.open(completion_id, tenant)
        engine = asyncio.create_task(_generate_until_cancelled(buffer, engine_stopped))
        events = encode_events(ChunkEncoder(completion_id, "m", "chat"), buffer, False, None)
        writer = asyncio.create_task(streams.write(completion_id, tenant, events, engine))
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

    async def follow(events: AsyncIterator[bytes], seconds: float) -> int:
        seen = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                async for event in events:
                    seen += b"data: {" in event
        return seen

    engine = writer = None
    try:
        await streams.open(completion_id, tenant)
        engine = asyncio.create_task(_generate_until_cancelled(buffer, asyncio.Event()))
        events = encode_events(ChunkEncoder(completion_id, "m", "chat"), buffer, False, None)
        writer = asyncio.create_task(streams.write(completion_id, tenant, events, engine))
        first = await streams.read(completion_id, tenant, None)
        assert await follow(first, 1.5), "the reader saw no event"
        await first.aclose()
        again = await streams.read(completion_id, tenant, None)  # NotFound before the fix
        await again.aclose()
    finally:
        for task in (engine, writer):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (engine, writer) if t), return_exceptions=True)
        await redis.delete(f"lpx:sse:{completion_id}", f"lpx:sse:{completion_id}:tenant")


async def test_cancelled_readers_of_a_live_stream_end(redis: Redis) -> None:
    # A reader keeps the stream marked as read; one that outlived its cancellation (Python
    # 3.11's wait_for inside the Redis client swallows one landing as a call completes) would
    # keep an abandoned generation running. Twenty readers, so the race is all but certain.
    streams = ResumableStreams(redis, window_s=0.3, heartbeat_s=0.1)
    completion_id, tenant = f"cmpl-{uuid.uuid4().hex}", uuid.uuid4()
    buffer = StreamBuffer(max_bytes=1 << 20)

    async def follow() -> None:
        async for _ in await streams.read(completion_id, tenant, None):
            pass

    engine = writer = None
    readers: list[asyncio.Task[None]] = []
    try:
        await streams.open(completion_id, tenant)
        engine = asyncio.create_task(_generate_until_cancelled(buffer, asyncio.Event()))
        events = encode_events(ChunkEncoder(completion_id, "m", "chat"), buffer, False, None)
        writer = asyncio.create_task(streams.write(completion_id, tenant, events, engine))
        readers = [asyncio.create_task(follow()) for _ in range(20)]
        await asyncio.sleep(0.5)
        for reader in readers:
            reader.cancel()
        _, still_reading = await asyncio.wait(readers, timeout=2.0)
        assert not still_reading, f"{len(still_reading)} of 20 readers went on after cancel"
    finally:
        tasks = [t for t in (engine, writer, *readers) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=5.0)
        await redis.delete(f"lpx:sse:{completion_id}", f"lpx:sse:{completion_id}:tenant")
