"""From the stream buffer to SSE bytes: the client side of a streaming request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.lane import PriorityLane
from loraplex.gateway.sse import HEARTBEAT, EventEncoder, Usage

CLEANUP_WAIT_S = 5.0


async def encode_events(
    encoder: EventEncoder,
    buffer: StreamBuffer,
    include_usage: bool,
    heartbeat_s: float | None,
    lane: PriorityLane | None = None,
) -> AsyncIterator[list[bytes]]:
    """SSE events for everything the buffer receives, coalesced, one batch per `take()`;
    ends after the last one.

    A batch is what is ready at once (output, then the finish, usage and the end marker):
    the live relay sends it in one write, since each write is a send(2) and those are the
    largest per-request cost left in the gateway on a busy host; the resumable copy stores
    each event as its own entry, so a resume can start after any event id. With
    `heartbeat_s`, a comment is sent whenever nothing arrived for that long (while the
    request is queued or the adapter loads), so proxies and clients keep the connection.
    With a `lane`, each batch waits (briefly) for new requests being admitted to reach
    their engine first, and takes whatever arrived meanwhile with it; after the first
    token, a busy process paces the stream's writes (`PriorityLane.pace`).
    """
    if lane is not None:
        lane.open_stream()
    last: float | None = None  # when the stream last wrote, once its first token went out
    try:
        opening = encoder.opening()
        if opening:
            yield opening
        while True:
            if not await buffer.wait(heartbeat_s):
                yield [HEARTBEAT]
                continue
            if lane is not None:
                await lane.yield_to_new()
                if last is not None and not buffer.closed and not buffer.choices_done:
                    await lane.pace(last)  # the end of a stream is never held
            taken = buffer.take()
            if buffer.first_relayed_at is None and any(p.text or p.tool_calls for p in taken.parts):
                buffer.first_relayed_at = time.monotonic()
            batch = encoder.progress(taken)
            if taken.error:
                batch += encoder.failure(*taken.error)
            elif taken.finish_reason:
                usage = Usage(buffer.prompt_tokens, buffer.completion_tokens)
                batch += encoder.closing(usage if include_usage else None)
            if batch:
                yield batch
                if buffer.first_relayed_at is not None:
                    last = time.monotonic()
            if taken.error or taken.finish_reason:
                return
    finally:
        if lane is not None:
            lane.close_stream()


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
            await close_events(batches)  # its `finally` runs now, not when it is collected
        # Bounded: the cleanup's own steps have timeouts; this is the backstop.
        await asyncio.wait({task}, timeout=CLEANUP_WAIT_S)


async def close_events(batches: AsyncIterator[list[bytes]]) -> None:
    """Close an events generator left before its end (a plain iterator has nothing to close)."""
    aclose = getattr(batches, "aclose", None)
    if aclose is not None:
        await aclose()
