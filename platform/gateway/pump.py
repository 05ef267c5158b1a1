"""The engine side of one request: pick an engine, get the adapter there, generate, feed.

Runs as its own task so the client side can send heartbeats while it waits, and so a slow
client never slows the engine read. Each phase has its own deadline and its own error code:
`queue_timeout` (engine choice and adapter load), `ttft_timeout` (first token),
`idle_timeout` (gap between tokens) and `total_timeout` (the whole request).

An engine that fails before the first token is skipped and the next candidate tried, and
so is one that stays silent past `ttft_timeout` (a host cut off the network gives no error,
only silence): the client has seen nothing yet, so another engine may still answer it.
After the first token the stream ends with an `engine_died` error event, never a hang.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from loraplex.adapters.errors import StoreError, StoreUnavailable
from loraplex.errors import LoraplexError
from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter, ReadyEngine
from loraplex.serving.engines import (
    AdapterNotLoaded,
    EngineDied,
    EngineError,
    EngineRejected,
    EngineUnavailable,
    GenerateChunk,
    GenerateRequest,
)

log = logging.getLogger("loraplex.gateway")
RETRYABLE = (EngineUnavailable, EngineDied, AdapterNotLoaded)
DRAIN_S = 1.0  # the most a finished request waits for the rest of the engine's reply
# Aborts sent to engines that went silent, run beside the retry (one to a cut-off host may
# wait for its connect timeout); held here so they are not collected mid-flight.
_SILENT_ABORTS: set[asyncio.Task[None]] = set()
# After a TTFT timeout the engine gets this long to answer a health probe; one that does not
# leaves this process's rotation at once (the poller brings it back when it answers again),
# so that placement puts the retry, and the requests after it, on another engine. Less
# than the poller's own limit (5 s): the client has already waited a whole TTFT timeout.
SILENT_PROBE_S = 2.0


@dataclass(frozen=True)
class StreamLimits:
    """Per-request buffer size, heartbeat interval and the four timeouts."""

    buffer_bytes: int = 256 * 1024
    heartbeat_s: float = 5.0
    queue_timeout_s: float = 30.0
    ttft_timeout_s: float = 60.0
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 600.0


@dataclass
class EngineRun:
    """One request as the pump runs it."""

    completion_id: str
    target: Target
    request: GenerateRequest  # rid and adapter are filled in per attempt
    limits: StreamLimits
    started_at: float
    received_at: float | None = None  # the handler got the request (before resolution)
    engine_sent_at: float | None = None  # the last attempt's request went to the engine
    engine_name: str = ""
    engine_id: str | None = None
    attempts: int = 0
    waited_on_silent_s: float = 0.0  # spent on engines that sent no first token in time
    # Called once the engine request is sent (and again, harmlessly, when the pump ends):
    # the request stops being urgent (gateway/lane.py).
    on_sent: Callable[[], None] = lambda: None
    # Called with the engine's id and the TTFT when the first token is in: the engine's
    # admission cap learns from it then, not a whole stream later (gateway/gate.py).
    on_first_token: Callable[[str, float], None] = lambda engine_id, ttft_s: None


class _PhaseTimeout(Exception):
    def __init__(self, code: str):
        self.code = code


async def pump(
    job: EngineRun,
    buffer: StreamBuffer,
    router: EngineRouter,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run the request on an engine and feed `buffer` until it finishes, fails or is cancelled."""
    deadline_total = job.started_at + job.limits.total_timeout_s
    try:
        stream = await _first_token(job, buffer, router, clock, deadline_total)
        if stream is not None:
            await _relay(job, buffer, stream, clock, deadline_total)
    except _PhaseTimeout as exc:
        buffer.fail(exc.code, f"{exc.code.replace('_', ' ')} after {_elapsed(job, clock):.1f}s")
    except EngineRejected as exc:
        # A 4xx from the engine is about the request (the gateway checked what it could),
        # and its message is for the client; anything else is the engine's own failure.
        if exc.status_code == 400:
            buffer.fail("engine_rejected", exc.detail)
        else:
            buffer.fail("engine_error", _logged(job, "the engine failed the request", exc))
    except EngineError as exc:
        buffer.fail("engine_unavailable", _logged(job, "no engine could serve the request", exc))
    except LoraplexError as exc:
        # Refused by placement (429 cold-load budget, 503 deferred): a stream ends with
        # this error event; a non-streamed request raises it as its HTTP status.
        buffer.fail(exc.code, exc.detail)
        raise
    except StoreError as exc:
        # A cold load could not fetch the adapter's files: a stream ends with this error
        # event; a non-streamed request raises it as its 503 (the store's words go to the log).
        unavailable = isinstance(exc, StoreUnavailable)
        code = "object_store_unavailable" if unavailable else "object_store_error"
        log.warning("%s: a cold load could not read the object store: %s", job.completion_id, exc)
        buffer.fail(
            code,
            f"the adapter's files are unavailable for now; retry shortly, or quote "
            f"{job.completion_id} when asking the operator",
        )
        raise


async def _first_token(
    job: EngineRun,
    buffer: StreamBuffer,
    router: EngineRouter,
    clock: Callable[[], float],
    deadline_total: float,
) -> _EngineAttempt | None:
    queue_deadline = min(job.started_at + job.limits.queue_timeout_s, deadline_total)
    tried: set[str] = set()
    last_error: Exception | None = None
    while True:
        ready = await _with_deadline(
            router.prepare(job.target, exclude=tried), queue_deadline, clock, "queue_timeout"
        )
        if ready is None:
            raise (
                last_error
                if last_error
                else EngineUnavailable("no healthy engine serves this model")
            )
        job.attempts += 1
        job.engine_sent_at = sent_at = clock()
        attempt = _EngineAttempt(ready, job.request, job.attempts)
        job.on_sent()  # `attempt.next()` below writes the request before it first waits
        ttft_deadline = min(clock() + job.limits.ttft_timeout_s, deadline_total)
        try:
            chunk = await _with_deadline(attempt.next(), ttft_deadline, clock, "ttft_timeout")
        except _PhaseTimeout as exc:
            if ttft_deadline >= deadline_total:  # the whole request's time is up
                await attempt.close(abort=True)
                raise
            # Probe before the abort frees the seat: an engine that does not answer leaves
            # the rotation first, so no request queued for that seat is sent to it.
            if not await _answers(ready):  # silent, not just busy
                await router.report_failure(ready, EngineUnavailable("silent past TTFT"))
            _abort_in_background(attempt)
            tried.add(ready.engine.id)
            last_error = exc
            job.waited_on_silent_s += clock() - sent_at
            if clock() >= deadline_total:
                raise _PhaseTimeout("total_timeout") from exc
            queue_deadline = min(clock() + job.limits.queue_timeout_s, deadline_total)
            log.warning(
                "%s: engine %s sent no first token in %.1fs; trying another",
                job.completion_id, ready.engine.name, job.limits.ttft_timeout_s,
            )  # fmt: skip
            continue
        except RETRYABLE as exc:
            await attempt.close(abort=False)
            await router.report_failure(ready, exc)
            if not isinstance(exc, AdapterNotLoaded):
                tried.add(ready.engine.id)
            last_error = exc
            log.warning(
                "engine %s failed before the first token (%s); retrying", ready.engine.name, exc
            )
            continue
        except BaseException:
            await attempt.close(abort=True)
            raise
        job.engine_name, job.engine_id = ready.engine.name, ready.engine.id
        buffer.first_token_at = clock()
        job.on_first_token(ready.engine.id, buffer.first_token_at - job.started_at)
        if _feed(buffer, chunk):
            await _end(attempt, buffer)
            return None
        return attempt


async def _relay(
    job: EngineRun,
    buffer: StreamBuffer,
    attempt: _EngineAttempt,
    clock: Callable[[], float],
    deadline_total: float,
) -> None:
    try:
        while not buffer.closed:
            idle_deadline = min(clock() + job.limits.idle_timeout_s, deadline_total)
            code = "idle_timeout" if idle_deadline < deadline_total else "total_timeout"
            try:
                chunk = await _with_deadline(attempt.next(), idle_deadline, clock, code)
            except StopAsyncIteration:
                buffer.finish("stop")
                break
            except EngineDied as exc:
                buffer.fail("engine_died", _logged(job, "the engine stopped mid-stream", exc))
                break
            if _feed(buffer, chunk):
                break
    finally:
        await _end(attempt, buffer)


async def _end(attempt: _EngineAttempt, buffer: StreamBuffer) -> None:
    """Close the engine stream: read the rest of a finished reply (its usage chunk comes
    after the last finish), then end the buffer; abort one that did not finish."""
    done = buffer.choices_done and buffer.error is None
    await attempt.close(abort=not done, counts_into=buffer if done else None)
    if done:
        buffer.finish()


def _feed(buffer: StreamBuffer, chunk: GenerateChunk) -> bool:
    """Push one chunk; True when the engine has nothing more to give the client: every
    choice finished, or the client fell behind."""
    _count(buffer, chunk)
    if not buffer.push(
        chunk.text, index=chunk.index, tool_calls=chunk.tool_calls, logprobs=chunk.logprobs
    ):
        buffer.fail("slow_client", "the client read too slowly; the stream was stopped")
        return True
    if chunk.finish_reason is not None:
        return buffer.finish_choice(chunk.index, chunk.finish_reason)
    return False


def _count(buffer: StreamBuffer, chunk: GenerateChunk) -> None:
    """Token counts from the chunk when it has them, else one token per piece of output."""
    if chunk.prompt_tokens is not None:
        buffer.prompt_tokens = chunk.prompt_tokens
    if chunk.completion_tokens is not None:
        # Running totals only grow; with n > 1 an engine may count one choice per chunk,
        # and its last (usage) chunk has the total, so the largest figure is the truest.
        buffer.completion_tokens = max(buffer.completion_tokens, chunk.completion_tokens)
    elif chunk.text or chunk.tool_calls:
        buffer.completion_tokens += 1


class _EngineAttempt:
    """One attempt's engine stream, with its own rid so it can be aborted."""

    def __init__(self, ready: ReadyEngine, request: GenerateRequest, attempt: int):
        self.ready = ready
        self.rid = uuid.uuid4().hex
        self.request = GenerateRequest(
            **{**_fields(request), "rid": self.rid, "adapter": ready.adapter_name}
        )
        self._stream: AsyncIterator[GenerateChunk] = ready.engine.driver.generate(self.request)
        self._closed = False
        ready.engine.in_flight += 1

    async def next(self) -> GenerateChunk:
        """The next chunk; StopAsyncIteration at the end."""
        return await anext(self._stream)

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
                    if counts_into is not None:
                        _count(
                            counts_into,
                            GenerateChunk(
                                prompt_tokens=chunk.prompt_tokens,
                                completion_tokens=chunk.completion_tokens,
                            ),
                        )
        except Exception as exc:  # nothing of it is needed: the reply is complete
            log.debug("draining %s failed: %s", self.rid, exc)


async def _answers(ready: ReadyEngine) -> bool:
    """Whether the engine answers a health probe within `SILENT_PROBE_S` (this process's
    verdict; the other API processes' pollers reach their own)."""
    try:
        async with asyncio.timeout(SILENT_PROBE_S):
            return (await ready.engine.driver.health()).healthy
    except Exception:  # timed out, refused, reset: it does not answer
        return False


def _abort_in_background(attempt: _EngineAttempt) -> None:
    """Abort a silent engine's request without waiting for the engine to answer."""
    task = asyncio.create_task(attempt.close(abort=True), name=f"abort-{attempt.rid}")
    _SILENT_ABORTS.add(task)
    task.add_done_callback(_SILENT_ABORTS.discard)


def _fields(request: GenerateRequest) -> dict[str, object]:
    return {f: getattr(request, f) for f in request.__struct_fields__}


async def _with_deadline(awaitable, deadline: float, clock: Callable[[], float], code: str):  # type: ignore[no-untyped-def]
    remaining = deadline - clock()
    if remaining <= 0:
        if hasattr(awaitable, "close"):
            awaitable.close()
        raise _PhaseTimeout(code)
    try:
        # asyncio.timeout, not wait_for: this runs per streamed chunk, and on Python 3.11
        # wait_for wraps every await in a new Task.
        async with asyncio.timeout(remaining):
            return await awaitable
    except TimeoutError as exc:
        raise _PhaseTimeout(code) from exc


def _logged(job: EngineRun, what: str, exc: EngineError) -> str:
    """Log an engine failure with its detail (engine address, transport error) under the
    request's id; the client's message says what happened and that id, nothing internal."""
    log.warning("%s: %s (engine %s): %s", job.completion_id, what, job.engine_name, exc.detail)
    return f"{what}; quote {job.completion_id} when asking the operator"


def _elapsed(job: EngineRun, clock: Callable[[], float]) -> float:
    return clock() - job.started_at
