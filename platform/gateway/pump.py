"""The engine side of one request: pick an engine, get the adapter there, generate, feed.

Runs as its own task so the client side can send heartbeats while it waits, and so a slow
client never slows the engine read. Each phase has its own deadline and its own error code:
`queue_timeout` (engine choice and adapter load), `ttft_timeout` (first token),
`idle_timeout` (gap between tokens) and `total_timeout` (the whole request).

An engine that fails before the first token is skipped and the next candidate tried, and
so is one that stays silent past `ttft_timeout` (a host cut off the network gives no error,
only silence): the client has seen nothing yet, so another engine may still answer it.
After the first token the answer is continued on another engine (`failover.py`) when its
engine dies, errs or stays silent past `idle_timeout`; where it cannot be continued exactly
or no engine is found in time, the stream ends with its error event, never a hang. When its
engine is draining, the answer moves on at its next token where it can be continued (and
another engine takes it); otherwise it finishes on the draining engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from loraplex.adapters.errors import StoreError, StoreUnavailable
from loraplex.errors import LoraplexError
from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.continuation import Transcript, continuable
from loraplex.gateway.engine_attempt import (
    EngineAttempt,
    abort_in_background,
    answers,
    count_tokens,
)
from loraplex.gateway.failover import SILENT, fail_over, move_off_draining, observe_gap
from loraplex.gateway.read_deadline import PhaseTimeout as _PhaseTimeout
from loraplex.gateway.read_deadline import ReadDeadline
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


@dataclass(frozen=True)
class StreamLimits:
    """Per-request buffer size, heartbeat interval, the four timeouts, and how long a
    failover may look for another engine."""

    buffer_bytes: int = 256 * 1024
    heartbeat_s: float = 5.0
    queue_timeout_s: float = 30.0
    ttft_timeout_s: float = 60.0
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 600.0
    failover_timeout_s: float = 10.0


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
    # The answer's token ids so far, what a failover continues from (gateway/failover.py).
    transcript: Transcript = field(default_factory=Transcript)
    failovers: int = 0
    failover_tried: set[str] = field(default_factory=set)  # engines that failed it mid-stream
    last_output_at: float | None = None  # the last piece of output came from the engine
    gap_since: float | None = None  # a failover began; the gap ends at the next output


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
            await _relay(job, buffer, stream, router, clock, deadline_total)
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
) -> EngineAttempt | None:
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
        attempt = EngineAttempt(ready, _asking_ids(job.request, ready), job.transcript)
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
            if not await answers(ready):  # silent, not just busy
                await router.report_failure(ready, EngineUnavailable("silent past TTFT"))
            abort_in_background(attempt)
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
        job.last_output_at = buffer.first_token_at
        if _feed(buffer, chunk):
            await _end(attempt, buffer)
            return None
        return attempt


async def _relay(
    job: EngineRun,
    buffer: StreamBuffer,
    attempt: EngineAttempt,
    router: EngineRouter,
    clock: Callable[[], float],
    deadline_total: float,
) -> None:
    # One timer for the stream's reads, not an asyncio.timeout per chunk (read_deadline.py).
    reads = ReadDeadline(job.limits.idle_timeout_s, deadline_total, clock)
    moves_on_drain = True  # until a drain finds it cannot move (failover.py)
    try:
        while not buffer.closed:
            try:
                with reads:
                    chunk = attempt.take(await attempt.read())
                if chunk is None:
                    continue  # token ids only, recorded
            except StopAsyncIteration:
                buffer.finish("stop")
                break
            except (EngineError, _PhaseTimeout) as exc:
                reason = _failover_reason(exc)
                if reason is None:
                    raise
                following = await fail_over(
                    job, buffer, router, attempt, reason, exc, clock, deadline_total
                )
                if following is None:
                    _end_as_failed(job, buffer, exc)
                    break
                attempt = following
                continue
            job.last_output_at = clock()
            observe_gap(job, job.last_output_at)
            if _feed(buffer, chunk):
                break
            if moves_on_drain and attempt.ready.engine.draining:
                # Its engine is draining: the answer goes on elsewhere from this token.
                following = await move_off_draining(job, router, attempt, clock, deadline_total)
                moves_on_drain = following is not None
                attempt = following or attempt
    finally:
        reads.close()
        await _end(attempt, buffer)


def _failover_reason(exc: Exception) -> str | None:
    """Why the engine is left mid-stream, or None when the failure is not the engine's (a
    refusal of the request, the whole request's time up): those end the stream."""
    if isinstance(exc, _PhaseTimeout):
        return SILENT if exc.code == "idle_timeout" else None
    if isinstance(exc, EngineDied):
        return "engine_died"
    if isinstance(exc, EngineRejected) and exc.status_code == 400:
        return None
    return "engine_error"


def _end_as_failed(job: EngineRun, buffer: StreamBuffer, exc: Exception) -> None:
    """End a stream that was not continued, as it ended before failover existed."""
    if buffer.closed or buffer.choices_done:
        return  # finished after all: every token had been sent
    if isinstance(exc, EngineDied):
        buffer.fail("engine_died", _logged(job, "the engine stopped mid-stream", exc))
    else:
        raise exc


def _asking_ids(request: GenerateRequest, ready: ReadyEngine) -> GenerateRequest:
    """The request, asking for token ids where the answer could be continued from them."""
    if not ready.engine.driver.continues_by_token_ids:
        return request
    if continuable(request) is not None:
        return request
    return msgspec.structs.replace(request, want_token_ids=True)


async def _end(attempt: EngineAttempt, buffer: StreamBuffer) -> None:
    """Close the engine stream: read the rest of a finished reply (its usage chunk comes
    after the last finish), then end the buffer; abort one that did not finish."""
    done = buffer.choices_done and buffer.error is None
    await attempt.close(abort=not done, counts_into=buffer if done else None)
    if done:
        buffer.finish()


def _feed(buffer: StreamBuffer, chunk: GenerateChunk) -> bool:
    """Push one chunk; True when the engine has nothing more to give the client: every
    choice finished, or the client fell behind."""
    count_tokens(buffer, chunk)
    if not buffer.push(
        chunk.text, index=chunk.index, tool_calls=chunk.tool_calls, logprobs=chunk.logprobs
    ):
        buffer.fail("slow_client", "the client read too slowly; the stream was stopped")
        return True
    if chunk.finish_reason is not None:
        return buffer.finish_choice(chunk.index, chunk.finish_reason)
    return False


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
