"""A stream that survives its engine: when the engine of a stream past its first token fails,
the answer goes on from another engine that serves the same adapter version.

The failed engine is retired for this request (aborted, and out of rotation when it is dead
or silent); then, within `failover_timeout_s`, placement finds another engine (loading the
adapter there as for a first try), and the continuation (`continuation.py`: the prompt's
and the answer's token ids, the tokens left) is sent to it. Its chunks go into the same
buffer, so the client reads one stream: event ids go on, resumable streams resume across
it, one finish reason, usage counting each token once. When the answer cannot be continued
exactly, or no engine is found in time, the caller ends the stream as it did before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from loraplex.adapters.errors import StoreError
from loraplex.errors import LoraplexError
from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.continuation import (
    continuation_request,
    remaining_tokens,
    why_not_continued,
)
from loraplex.gateway.engine_attempt import EngineAttempt, abort_in_background, answers
from loraplex.gateway.routing import EngineRouter
from loraplex.observability import metrics
from loraplex.serving.engines import EngineUnavailable

if TYPE_CHECKING:  # the pump imports this module
    from loraplex.gateway.pump import EngineRun

log = logging.getLogger("loraplex.gateway")
SILENT = "silent"  # the reason for an engine quiet past the idle timeout
DRAINED = "drained"  # the reason for a stream moved off a draining engine
CONTINUED, NO_ENGINE, COMPLETE = "continued", "no_engine", "complete"


async def fail_over(
    job: EngineRun,
    buffer: StreamBuffer,
    router: EngineRouter,
    failed: EngineAttempt,
    reason: str,
    error: Exception,
    clock: Callable[[], float],
    deadline_total: float,
) -> EngineAttempt | None:
    """The attempt that continues the answer on another engine, or None: the stream ends
    (as before failover) unless the answer turned out complete, which finishes `buffer`."""
    job.gap_since = job.last_output_at
    await _retire(failed, router, reason, error)
    outcome = _refusal(job)
    attempt = None
    if outcome == COMPLETE:  # only the finish was lost with the engine
        buffer.finish_choice(0, "length")
    elif outcome is None:
        deadline = min(deadline_total, clock() + job.limits.failover_timeout_s)
        attempt = await _place(job, router, failed, deadline, clock)
        outcome = NO_ENGINE if attempt is None else CONTINUED
    _record(job, failed, reason, outcome, error, attempt)
    return attempt


def observe_gap(job: EngineRun, now: float) -> None:
    """Record the gap the client saw, at the first output after a failover."""
    if job.gap_since is not None:
        metrics.FAILOVER_GAP_SECONDS.observe(now - job.gap_since)
        job.gap_since = None


async def move_off_draining(
    job: EngineRun,
    router: EngineRouter,
    draining: EngineAttempt,
    clock: Callable[[], float],
    deadline_total: float,
) -> EngineAttempt | None:
    """The attempt that continues the answer on another engine, its request on the draining
    engine aborted; None: the stream stays there (it cannot be continued exactly, or no
    other engine was found in time) and finishes within the drain's grace, as before.

    Placement comes first: the draining engine's stream is left unread meanwhile, not
    aborted, so a stream with nowhere to go reads on from where it was."""
    outcome = _refusal(job)  # COMPLETE: its finish follows at once
    attempt = None
    if outcome is None:
        job.gap_since = job.last_output_at
        deadline = min(deadline_total, clock() + job.limits.failover_timeout_s)
        attempt = await _place(job, router, draining, deadline, clock)
        outcome = NO_ENGINE if attempt is None else CONTINUED
    if attempt is None:
        job.gap_since = None
        metrics.FAILOVERS.labels(DRAINED, outcome).inc()
        log.info("%s: stays on draining engine %s (%s)", job.completion_id,
                 draining.ready.engine.name, outcome)  # fmt: skip
        return None
    await draining.close(abort=True)
    _record(job, draining, DRAINED, outcome, "its engine is draining", attempt)
    return attempt


def _refusal(job: EngineRun) -> str | None:
    """Why the answer is not continued elsewhere (COMPLETE: every token was sent); None
    when it can be."""
    outcome: str | None = why_not_continued(job.request, job.transcript)
    if (
        outcome is None
        and remaining_tokens(job.request, job.transcript, job.target.max_context) <= 0
    ):
        return COMPLETE
    return outcome


def _record(
    job: EngineRun,
    left: EngineAttempt,
    reason: str,
    outcome: str,
    why: object,
    following: EngineAttempt | None,
) -> None:
    """Count and log a failover; a continued answer now runs on `following`'s engine."""
    metrics.FAILOVERS.labels(reason, outcome).inc()
    log.warning(
        "%s: engine %s left after %d tokens (%s: %s); failover: %s",
        job.completion_id, left.ready.engine.name, job.transcript.tokens, reason, why, outcome,
    )  # fmt: skip
    if following is not None:
        job.engine_name, job.engine_id = following.ready.engine.name, following.ready.engine.id
        job.failovers += 1


async def _retire(
    failed: EngineAttempt, router: EngineRouter, reason: str, error: Exception
) -> None:
    """Stop the failed engine's request; a dead or silent engine leaves the rotation, so
    placement does not choose it again (its poller brings it back when it answers)."""
    if reason == SILENT:
        if not await answers(failed.ready):
            await router.report_failure(failed.ready, EngineUnavailable("silent mid-stream"))
        abort_in_background(failed)  # a cut-off host may hold the abort for its timeout
        return
    await failed.close(abort=True)
    await router.report_failure(failed.ready, error)


async def _place(
    job: EngineRun,
    router: EngineRouter,
    failed: EngineAttempt,
    deadline: float,
    clock: Callable[[], float],
) -> EngineAttempt | None:
    """Another engine able to continue from token ids, with the continuation sent to it;
    None when none is found before `deadline`."""
    tried = job.failover_tried
    tried.add(failed.ready.engine.id)
    request = continuation_request(job.request, job.transcript, job.target.max_context)
    try:
        async with asyncio.timeout(max(0.0, deadline - clock())):
            while (ready := await router.prepare(job.target, exclude=tried)) is not None:
                if ready.engine.driver.continues_by_token_ids:
                    # The held-back tokens are generated again; until an engine takes the
                    # continuation they stay, so a drained stream can read on where it was.
                    job.transcript.restart_at_settled()
                    return EngineAttempt(ready, request, job.transcript, job.transcript.tokens)
                ready.release()  # an engine that cannot take token ids cannot continue it
                tried.add(ready.engine.id)
    except TimeoutError:
        pass
    except (LoraplexError, StoreError) as exc:  # refused by placement, or a failed load
        log.warning("%s: no engine to continue on: %s", job.completion_id, exc)
    return None
