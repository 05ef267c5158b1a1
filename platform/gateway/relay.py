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
) -> AsyncIterator[list[bytes]]:
    """SSE events for everything the buffer receives, coalesced, one batch per `take()`;
    ends after the last one.

    A batch is what is ready at once (text, then the finish, usage and `[DONE]`): the live
    relay sends it in one write, since each write is a send(2) and those are the largest
    per-request cost left in the gateway on a busy host; the resumable copy stores each
    event as its own entry, so a resume can start after any event id. With `heartbeat_s`, a
    comment is sent whenever nothing arrived for that long (while the request is queued or
    the adapter loads), so proxies and clients keep the connection.
    """
    event_id = 0
    if encoder.kind == "chat":
        yield [encoder.role(event_id)]
    while True:
        if not await buffer.wait(heartbeat_s):
            yield [HEARTBEAT]
            continue
        taken = buffer.take()
        batch: list[bytes] = []
        if taken.text:
            event_id += 1
            if buffer.first_relayed_at is None:
                buffer.first_relayed_at = time.monotonic()
            batch.append(encoder.text(event_id, taken.text))
        if taken.error:
            event_id += 1
            batch.append(encoder.error(event_id, *taken.error))
        elif taken.finish_reason:
            event_id += 1
            batch.append(encoder.finish(event_id, taken.finish_reason))
            if include_usage:
                event_id += 1
                batch.append(
                    encoder.usage(event_id, buffer.prompt_tokens, buffer.completion_tokens)
                )
            batch.append(DONE)
        if batch:
            yield batch
        if taken.error or taken.finish_reason:
            return


async def until_disconnect(
    batches: AsyncIterator[list[bytes]], task: asyncio.Task[None]
) -> AsyncIterator[bytes]:
    """Relay `batches`, one write each; when the client goes away first, cancel the engine
    side (`task`) at once.

    After the last event the engine side is left to finish its own cleanup (close the engine
    stream, give back the tenant's concurrency leases) and awaited, so a client that sends
    its next request as soon as this one ends finds its slot free. Cancelling it there
    instead would interrupt that cleanup half-way.
    """
    finished = False
    try:
        async for batch in batches:
            yield batch[0] if len(batch) == 1 else b"".join(batch)
        finished = True
    finally:
        if not finished:
            task.cancel()
        # Bounded: the cleanup's own steps have timeouts; this is the backstop.
        await asyncio.wait({task}, timeout=CLEANUP_WAIT_S)
