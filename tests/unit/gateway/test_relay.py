"""The client side of a stream: what is ready at once goes out in one write, in order."""

from __future__ import annotations

import asyncio

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.relay import encode_events, until_disconnect
from loraplex.gateway.sse import DONE, ChunkEncoder


async def _writes(buffer: StreamBuffer, include_usage: bool = True) -> list[bytes]:
    encoder = ChunkEncoder("chatcmpl-1", "m", "chat")
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    task = asyncio.ensure_future(done)
    batches = encode_events(encoder, buffer, include_usage, heartbeat_s=None)
    return [write async for write in until_disconnect(batches, task)]


async def test_the_last_text_finish_usage_and_done_ready_at_once_are_one_write() -> None:
    buffer = StreamBuffer(max_bytes=1024)
    buffer.push("Hel")
    buffer.push("lo")
    buffer.completion_tokens, buffer.prompt_tokens = 2, 3
    buffer.finish("stop")

    role, last = await _writes(buffer)

    assert b'"role":"assistant"' in role
    ids = [int(line[4:]) for line in last.split(b"\n") if line.startswith(b"id: ")]
    assert ids == [1, 2, 3]  # text, finish, usage: each its own event, in one write
    assert b'"content":"Hello"' in last and b'"finish_reason":"stop"' in last
    assert b'"completion_tokens":2' in last and last.endswith(DONE)


async def test_an_error_ends_the_batch_without_done() -> None:
    buffer = StreamBuffer(max_bytes=1024)
    buffer.push("partial")
    buffer.fail("engine_died", "the engine stopped")

    *_, last = await _writes(buffer)

    assert b'"content":"partial"' in last and b'"code":"engine_died"' in last
    assert DONE not in last
