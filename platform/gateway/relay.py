"""From the stream buffer to SSE bytes: the client side of a streaming request."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.sse import DONE, HEARTBEAT, ChunkEncoder


async def encode_events(
    encoder: ChunkEncoder, buffer: StreamBuffer, include_usage: bool, heartbeat_s: float | None
) -> AsyncIterator[bytes]:
    """SSE events for everything the buffer receives, coalesced; ends after the last one.

    With `heartbeat_s`, a comment is sent whenever nothing arrived for that long (while the
    request is queued or the adapter loads), so proxies and clients keep the connection.
    """
    event_id = 0
    if encoder.kind == "chat":
        yield encoder.role(event_id)
    while True:
        if not await buffer.wait(heartbeat_s):
            yield HEARTBEAT
            continue
        taken = buffer.take()
        if taken.text:
            event_id += 1
            yield encoder.text(event_id, taken.text)
        if taken.error:
            event_id += 1
            yield encoder.error(event_id, *taken.error)
            return
        if taken.finish_reason:
            event_id += 1
            yield encoder.finish(event_id, taken.finish_reason)
            if include_usage:
                event_id += 1
                yield encoder.usage(event_id, buffer.prompt_tokens, buffer.completion_tokens)
            yield DONE
            return


async def until_disconnect(
    events: AsyncIterator[bytes], task: asyncio.Task[None]
) -> AsyncIterator[bytes]:
    """Relay `events`; when the client goes away first, cancel the engine side (`task`) at once."""
    try:
        async for event in events:
            yield event
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
