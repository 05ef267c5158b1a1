"""Streams in flight hold their next write while a new request is on its way to the engine."""

from __future__ import annotations

import asyncio

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.lane import PriorityLane
from loraplex.gateway.relay import encode_events, until_disconnect
from loraplex.gateway.sse import ChunkEncoder


def _events(lane: PriorityLane) -> tuple[StreamBuffer, asyncio.Queue[float]]:
    """A stream whose relay puts the loop time of each batch it sends on a queue."""
    buffer = StreamBuffer(max_bytes=1 << 16)
    sent: asyncio.Queue[float] = asyncio.Queue()

    async def relay() -> None:
        encoder = ChunkEncoder("chatcmpl-1", "m", "chat")
        async for _batch in encode_events(encoder, buffer, False, None, lane=lane):
            sent.put_nowait(asyncio.get_running_loop().time())

    asyncio.get_running_loop().create_task(relay())
    return buffer, sent


def test_with_no_new_request_a_stream_writes_at_once() -> None:
    async def scenario() -> float:
        lane = PriorityLane(max_hold_s=1.0)
        buffer, sent = _events(lane)
        await sent.get()  # the opening
        pushed = asyncio.get_running_loop().time()
        buffer.push("hello")
        return await sent.get() - pushed

    assert asyncio.run(scenario()) < 0.05


def test_a_stream_holds_its_write_until_the_new_request_is_sent() -> None:
    async def scenario() -> tuple[bool, list[object]]:
        lane = PriorityLane(max_hold_s=1.0)
        buffer, sent = _events(lane)
        await sent.get()
        urgent = lane.admit()
        buffer.push("hel")
        await asyncio.sleep(0.05)
        held = sent.empty()
        buffer.push("lo")  # arrives while held: goes out with the first piece
        urgent.done()
        urgent.done()  # twice is harmless
        await sent.get()
        return held, list(buffer.take().parts)  # nothing left: both pieces went in one batch

    held, left = asyncio.run(scenario())
    assert held and left == []


def test_a_stream_is_held_no_longer_than_the_lane_allows() -> None:
    async def scenario() -> float:
        lane = PriorityLane(max_hold_s=0.05)
        buffer, sent = _events(lane)
        await sent.get()
        lane.admit()  # never released: a bug elsewhere must not stall streams
        pushed = asyncio.get_running_loop().time()
        buffer.push("hello")
        return await sent.get() - pushed

    assert 0.04 <= asyncio.run(scenario()) < 0.5


def test_a_disabled_lane_never_holds() -> None:
    lane = PriorityLane(enabled=False)
    lane.admit()
    assert lane.urgent == 0


def _writes_of_a_stream(streams_open: int) -> tuple[float, int]:
    """One stream among `streams_open` gets a token every 10 ms for 0.3 s: how long its first
    token waited, and how many writes it took to send them all."""

    async def scenario() -> tuple[float, int]:
        lane = PriorityLane(pace_s=0.05)
        lane.streams = streams_open - 1  # the others
        buffer, sent = _events(lane)
        await sent.get()  # the opening
        pushed = asyncio.get_running_loop().time()
        buffer.push("a")
        first = await sent.get() - pushed
        for _ in range(30):
            await asyncio.sleep(0.01)
            buffer.push("b")
        buffer.finish("stop")
        writes = 0
        while True:
            try:
                await asyncio.wait_for(sent.get(), 0.2)
            except TimeoutError:
                return first, writes
            writes += 1

    return asyncio.run(scenario())


def test_a_busy_process_paces_each_streams_writes_but_never_its_first_token() -> None:
    first, paced = _writes_of_a_stream(64)
    assert first < 0.03
    assert paced <= 10  # 0.3 s of tokens at most once per 0.05 s, not 30 writes


def test_a_quiet_process_writes_each_token_as_it_comes() -> None:
    _, writes = _writes_of_a_stream(2)
    assert writes >= 20


def test_a_paced_stream_sends_its_end_at_once() -> None:
    async def scenario() -> float:
        lane = PriorityLane(pace_s=1.0)
        lane.streams = 63
        buffer, sent = _events(lane)
        await sent.get()  # the opening
        buffer.push("a")
        await sent.get()  # the first token
        ended = asyncio.get_running_loop().time()
        buffer.push("b")
        buffer.finish("stop")
        return await sent.get() - ended

    assert asyncio.run(scenario()) < 0.5


def test_a_stream_its_client_left_stops_counting_at_once() -> None:
    async def scenario() -> int:
        lane = PriorityLane()
        buffer = StreamBuffer(max_bytes=1 << 16)
        engine_side = asyncio.get_running_loop().create_task(asyncio.sleep(10))
        events = encode_events(ChunkEncoder("chatcmpl-1", "m", "chat"), buffer, False, None, lane)
        relay = until_disconnect(events, engine_side)
        await anext(relay)  # the opening went out; then the client goes away
        await relay.aclose()
        return lane.streams

    assert asyncio.run(scenario()) == 0
