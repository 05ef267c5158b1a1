"""The stream buffer's heartbeat (gateway/buffer.py `wait`): a client waiting with nothing
arriving gets one after the heartbeat interval, never while output flows, and output that
arrives mid-wait is taken at once."""

from __future__ import annotations

import asyncio
import time

from loraplex.gateway.buffer import StreamBuffer

BEAT_S = 0.05


async def test_a_quiet_stream_gets_a_heartbeat_after_the_interval() -> None:
    buffer = StreamBuffer(max_bytes=1024)
    started = time.monotonic()
    assert await buffer.wait(BEAT_S) is False
    assert time.monotonic() - started >= BEAT_S * 0.9


async def test_no_heartbeat_while_output_flows_and_one_once_it_stops() -> None:
    buffer = StreamBuffer(max_bytes=1024)

    async def engine() -> None:
        for _ in range(12):  # 12 pieces, BEAT_S / 2 apart: several intervals in all
            await asyncio.sleep(BEAT_S / 2)
            buffer.push("x")

    feeding = asyncio.create_task(engine())
    texts, beats = [], 0
    while not feeding.done():
        if await buffer.wait(BEAT_S):
            texts.append(buffer.take().text)
        else:
            beats += 1
    await feeding
    texts.append(buffer.take().text)
    assert "".join(texts) == "x" * 12 and beats == 0
    assert await buffer.wait(BEAT_S) is False  # quiet again: the heartbeat comes back


async def test_output_arriving_mid_wait_is_taken_at_once() -> None:
    buffer = StreamBuffer(max_bytes=1024)
    asyncio.get_running_loop().call_later(BEAT_S / 5, buffer.push, "hi")
    assert await buffer.wait(10 * BEAT_S) is True  # a heartbeat would have been False
    assert buffer.take().text == "hi"
