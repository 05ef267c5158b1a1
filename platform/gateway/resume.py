"""Resumable streams: events kept in Redis for a short window, replayable from any replica.

Opt-in per request (`stream_options.resumable: true`). The engine side writes every SSE
event into a Redis stream `lpx:sse:<id>` (entry id = event id + 1, so replay is exact and
duplicate-free); every reader — the original request and any `GET .../{id}/events` with
`Last-Event-ID` — reads that stream. Readers keep a presence key alive; when nobody has
read for `window_s`, a watcher cancels the engine side (which aborts the engine request and
ends the events with an `aborted` error) and deletes the stream.

The watcher cancels the engine-side task itself, not the writer: a writer cancelled while
it waits inside a Redis call may lose that cancellation, and would then keep copying a
generation nobody reads to its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from loraplex.errors import NotFound
from loraplex.gateway.relay import CLEANUP_WAIT_S, close_events
from loraplex.gateway.sse import HEARTBEAT

log = logging.getLogger("loraplex.gateway")
READ_GRACE_S = 2.0  # past the XREAD's own block: Redis is not answering
END = b"end"
PRESENCE_CHECK_S = 1.0


def raise_if_cancelled() -> None:
    """End a loop whose task was cancelled while a Redis call was finishing.

    Seen on Python 3.11 with redis-py 8.1 and with fakeredis: a reader of a live stream,
    its task cancelled by plain asyncio (`Task.cancel()`), got its XREAD's result instead
    of the CancelledError and went on following, 20 readers of 20; the call that lost the
    cancellation inside the client was not pinned down. Such a reader keeps the stream
    marked as read, so an abandoned generation would never be aborted. (Litestar cancels
    through anyio's scopes, which deliver the cancellation again at the next await: none
    of 20 readers went on that way.) The task still counts the cancellation as requested
    (`Task.cancelling()`); this raises it.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _key(completion_id: str) -> str:
    return f"lpx:sse:{completion_id}"


def _lost(completion_id: str) -> bytes:
    """The error event that ends a stream whose events can no longer be read (no `id:` line:
    the client's Last-Event-ID stays that of the last event it got, ready for a resume)."""
    message = (
        "the stream's events are unavailable for now; resume it later with Last-Event-ID, "
        f"or quote {completion_id} when asking the operator"
    )
    error = {"message": message, "type": "server_error", "param": None, "code": "stream_lost"}
    return b"data: %s\n\n" % json.dumps({"error": error}).encode()


class ResumableStreams:
    """Writes and reads resumable streams in Redis."""

    def __init__(self, redis: Any, window_s: float, heartbeat_s: float, readers_redis: Any = None):
        self.redis, self.window_s, self.heartbeat_s = redis, window_s, heartbeat_s
        # Readers block in XREAD on a pool of their own (`connections.readers_redis`), so
        # however many there are, writers, watchers and admission keep their connections.
        self.readers_redis = readers_redis if readers_redis is not None else redis

    async def open(self, completion_id: str, tenant_id: UUID) -> None:
        """Record the stream's owner so only that tenant can resume it."""
        await self.redis.set(
            f"{_key(completion_id)}:tenant", str(tenant_id), px=int(self.window_s * 3000)
        )
        await self._touch_presence(completion_id)

    async def write(
        self,
        completion_id: str,
        tenant_id: UUID,
        batches: AsyncIterator[list[bytes]],
        task: asyncio.Task[None],
    ) -> None:
        """Copy the events into Redis, one entry each (entry N holds event id N-1, so a
        resume starts right after the client's `Last-Event-ID`), one round trip per batch;
        abort the engine side when nobody reads for the window."""
        key = _key(completion_id)
        ttl_ms = int(self.window_s * 3000)
        watcher = asyncio.create_task(self._abort_when_abandoned(completion_id, task))
        copied = False
        try:
            entry = 0
            async for batch in batches:
                pipeline = self.redis.pipeline(transaction=False)
                for event in batch:
                    entry += 1
                    pipeline.xadd(key, {"e": event}, id=f"{entry}-0")
                # The owner record lives as long as the events: a generation longer than
                # its first TTL stays resumable by its tenant (SET, not PEXPIRE: the record
                # is back even if it lapsed between two batches).
                pipeline.set(f"{key}:tenant", str(tenant_id), px=ttl_ms)
                await pipeline.pexpire(key, ttl_ms).execute()
            await self.redis.xadd(key, {"e": b"", "end": b"1"}, id=f"{entry + 1}-0")
            copied = True
        finally:
            watcher.cancel()
            await close_events(batches)  # its `finally` (the lane's stream count) runs now
            if not copied and not task.done():
                task.cancel()  # this copy failed: nobody can read the generation
            # After the last event the engine side finishes its own cleanup (engine stream,
            # leases); cancelling it there would interrupt that half-way.
            await asyncio.wait({task}, timeout=CLEANUP_WAIT_S)

    async def read(
        self, completion_id: str, tenant_id: UUID, last_event_id: int | None
    ) -> AsyncIterator[bytes]:
        """Events after `last_event_id` (all when None), then live ones until the stream ends."""
        owner = await self.readers_redis.get(f"{_key(completion_id)}:tenant")
        if owner is None or owner.decode() != str(tenant_id):
            raise NotFound(f"no resumable stream {completion_id}")
        return self._follow(
            completion_id, "0-0" if last_event_id is None else f"{last_event_id + 1}-0"
        )

    async def _follow(self, completion_id: str, after: str) -> AsyncIterator[bytes]:
        key = _key(completion_id)
        try:
            async for event in self._entries(key, completion_id, after):
                yield event
        except Exception as exc:  # Redis went away under the reader: end with an error event
            log.warning("resumable stream %s lost its Redis: %r", completion_id, exc)
            yield _lost(completion_id)
        finally:
            # This reader is gone (finished, or its client disconnected): the window for a
            # resume starts now, so it lasts `window_s` from the last read, not less.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._touch_presence(completion_id, self.readers_redis))

    async def _entries(self, key: str, completion_id: str, after: str) -> AsyncIterator[bytes]:
        while True:
            raise_if_cancelled()
            await self._touch_presence(completion_id, self.readers_redis)
            # Bounded here: the process's Redis client has no socket timeout (connections.py).
            async with asyncio.timeout(self.heartbeat_s + READ_GRACE_S):
                found = await self.readers_redis.xread(
                    {key: after}, block=int(self.heartbeat_s * 1000), count=256
                )
            raise_if_cancelled()
            if not found:
                if not await self.readers_redis.exists(key):
                    return  # aborted (nobody read in time) or expired: nothing more will come
                yield HEARTBEAT
                continue
            for entry_id, fields in found[0][1]:
                after = entry_id
                if fields.get(b"end"):
                    return
                yield fields[b"e"]

    async def _touch_presence(self, completion_id: str, redis: Any = None) -> None:
        client = redis if redis is not None else self.redis
        await client.set(f"{_key(completion_id)}:reader", b"1", px=int(self.window_s * 1000))

    async def _abort_when_abandoned(
        self, completion_id: str, engine_side: asyncio.Task[Any]
    ) -> None:
        """Cancel the engine side once nobody has read the stream for the window."""
        with contextlib.suppress(asyncio.CancelledError):
            while not engine_side.done():
                raise_if_cancelled()
                await asyncio.sleep(PRESENCE_CHECK_S)
                try:
                    abandoned = not await self.redis.exists(f"{_key(completion_id)}:reader")
                except Exception as exc:  # Redis blinked: look again at the next check
                    log.warning("presence check of %s failed: %s", completion_id, exc)
                    continue
                raise_if_cancelled()
                if abandoned:
                    log.info(
                        "nobody resumed %s within %.0fs; aborting", completion_id, self.window_s
                    )
                    engine_side.cancel()
                    with contextlib.suppress(Exception):
                        await self.redis.delete(_key(completion_id))
                    return
