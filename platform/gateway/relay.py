"""From the stream buffer to SSE bytes: the client side of a streaming request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.sse import DONE, HEARTBEAT, ChunkEncoder

CLEANUP_WAIT_S = 5.0


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
            if buffer.first_relayed_at is None:
                buffer.first_relayed_at = time.monotonic()
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
    """Relay `events`; when the client goes away first, cancel the engine side (`task`) at once.

    After the last event the engine side is left to finish its own cleanup (close the engine
    stream, give back the tenant's concurrency leases) and awaited, so a client that sends
    its next request as soon as this one ends finds its slot free. Cancelling it there
    instead would interrupt that cleanup half-way.
    """
    finished = False
    try:
        async for event in events:
            yield event
        finished = True
    finally:
        if not finished:
            task.cancel()
        # Bounded: the cleanup's own steps have timeouts; this is the backstop.
        await asyncio.wait({task}, timeout=CLEANUP_WAIT_S)
