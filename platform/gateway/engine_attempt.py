"""One engine stream of a request (the pump's first try, a retry, or a failover's
continuation), with its own rid so it can be aborted, and the token counting it feeds."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import msgspec

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.continuation import Transcript, rebased
from loraplex.gateway.routing import ReadyEngine
from loraplex.serving.engines import GenerateChunk, GenerateRequest

log = logging.getLogger("loraplex.gateway")
DRAIN_S = 1.0  # the most a finished request waits for the rest of the engine's reply
# Aborts sent to engines that went silent, run beside the retry (one to a cut-off host may
# wait for its connect timeout); held here so they are not collected mid-flight.
_SILENT_ABORTS: set[asyncio.Task[None]] = set()
# After a TTFT timeout the engine gets this long to answer a health probe; one that does not
# leaves this process's rotation at once (the poller brings it back when it answers again),
# so that placement puts the retry, and the requests after it, on another engine. Less
# than the poller's own limit (5 s): the client has already waited a whole TTFT timeout.
SILENT_PROBE_S = 2.0


def count_tokens(buffer: StreamBuffer, chunk: GenerateChunk) -> None:
    """Token counts from the chunk when it has them, else one token per piece of output."""
    if chunk.prompt_tokens is not None:
        buffer.prompt_tokens = chunk.prompt_tokens
    if chunk.completion_tokens is not None:
        # Running totals only grow; with n > 1 an engine may count one choice per chunk,
        # and its last (usage) chunk has the total, so the largest figure is the truest.
        buffer.completion_tokens = max(buffer.completion_tokens, chunk.completion_tokens)
    elif chunk.text or chunk.tool_calls:
        buffer.completion_tokens += 1


class EngineAttempt:
    """One attempt's engine stream. Every chunk's token ids go into `transcript`; a
    continuation's chunks are counted as part of the whole answer (`tokens_before`)."""

    def __init__(
        self,
        ready: ReadyEngine,
        request: GenerateRequest,
        transcript: Transcript,
        tokens_before: int | None = None,
    ):
        self.ready = ready
        self.rid = uuid.uuid4().hex
        self.request = msgspec.structs.replace(request, rid=self.rid, adapter=ready.adapter_name)
        self.transcript = transcript
        self.tokens_before = tokens_before  # None: not a continuation
        self._stream: AsyncIterator[GenerateChunk] = ready.engine.driver.generate(self.request)
        # The engine's next chunk, raw (StopAsyncIteration at the end): the relay awaits it
        # straight and hands each chunk to `take`, with no coroutine of ours between.
        self.read = self._stream.__anext__
        self._closed = False
        ready.engine.in_flight += 1

    async def next(self) -> GenerateChunk:
        """The next chunk with something for the client; StopAsyncIteration at the end."""
        while True:
            chunk = self.take(await self.read())
            if chunk is not None:
                return chunk

    def take(self, chunk: GenerateChunk) -> GenerateChunk | None:
        """A chunk `read` gave: its token ids recorded, counted as part of the whole answer
        for a continuation; None when it has nothing for the client."""
        if self.tokens_before is not None:
            chunk = rebased(chunk, self.tokens_before)
        if chunk.index == 0:
            self.transcript.record(chunk)
        return None if _ids_only(chunk) else chunk

    async def close(self, *, abort: bool, counts_into: StreamBuffer | None = None) -> None:
        """Release the engine slot; abort the engine request if it is still running, else
        read the rest of the reply, taking its token counts into `counts_into`."""
        if self._closed:
            return
        self._closed = True
        self.ready.engine.in_flight -= 1
        self.ready.release()  # placement may now evict the adapter or release the next
        if abort:
            try:
                await asyncio.shield(self.ready.engine.driver.abort(self.rid))
            except Exception as exc:  # an unreachable engine has nothing left to abort
                log.debug("abort of %s failed: %s", self.rid, exc)
        else:
            await self._drain(counts_into)
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception as exc:  # closing a dead stream can raise its transport error
                log.debug("closing %s failed: %s", self.rid, exc)

    async def _drain(self, counts_into: StreamBuffer | None) -> None:
        """Read what the engine sends after the finish (usage, [DONE]) so the connection goes
        back to the pool: one closed unread is dropped, and the next request reconnects."""
        try:
            async with asyncio.timeout(DRAIN_S):
                async for chunk in self._stream:
                    if self.tokens_before is not None:
                        chunk = rebased(chunk, self.tokens_before)
                    if counts_into is not None:
                        count_tokens(
                            counts_into,
                            GenerateChunk(
                                prompt_tokens=chunk.prompt_tokens,
                                completion_tokens=chunk.completion_tokens,
                            ),
                        )
        except Exception as exc:  # nothing of it is needed: the reply is complete
            log.debug("draining %s failed: %s", self.rid, exc)


def _ids_only(chunk: GenerateChunk) -> bool:
    """A chunk with nothing for the client: only token ids (the prompt's on a chat stream's
    first chunk, or a token whose text the engine still holds back)."""
    return (
        not chunk.text
        and chunk.finish_reason is None
        and chunk.tool_calls is None
        and chunk.logprobs is None
        and chunk.prompt_tokens is None
        and chunk.completion_tokens is None
    )


async def answers(ready: ReadyEngine) -> bool:
    """Whether the engine answers a health probe within `SILENT_PROBE_S` (this process's
    verdict; the other API processes' pollers reach their own)."""
    try:
        async with asyncio.timeout(SILENT_PROBE_S):
            return (await ready.engine.driver.health()).healthy
    except Exception:  # timed out, refused, reset: it does not answer
        return False


def abort_in_background(attempt: EngineAttempt) -> None:
    """Abort a silent engine's request without waiting for the engine to answer."""
    task = asyncio.create_task(attempt.close(abort=True), name=f"abort-{attempt.rid}")
    _SILENT_ABORTS.add(task)
    task.add_done_callback(_SILENT_ABORTS.discard)
