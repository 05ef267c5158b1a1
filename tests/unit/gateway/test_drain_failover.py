"""A draining engine's streams move to another engine at their next token where they can be
continued exactly; the others finish on the draining engine, as before drain used failover."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.pump import EngineRun, StreamLimits, pump
from loraplex.serving.engines import GenerateChunk, GenerateOptions, GenerateRequest
from loraplex.serving.registry import EngineHandle
from tests.unit.gateway.test_failover import (
    MAX_TOKENS,
    TARGET,
    GreedyDriver,
    _failovers,
    _router,
)


class DrainedDriver(GreedyDriver):
    """A greedy engine whose agent starts draining it once it has sent `drain_after` tokens."""

    def __init__(self, drain_after: int):
        super().__init__()
        self.drain_after = drain_after
        self.handle: EngineHandle | None = None

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        sent = 0
        async for chunk in super().generate(request):
            yield chunk
            sent += bool(chunk.text)
            if sent == self.drain_after and self.handle is not None:
                self.handle.draining = True  # as the agent's heartbeat sets it (registry.py)


async def _drained(
    first: DrainedDriver, *others: Any, **request: Any
) -> tuple[StreamBuffer, EngineRun]:
    """The answer of a stream whose engine (`first`) starts draining mid-answer."""
    router = _router(first, *others)
    first.handle = router.registry.get("e0")
    fields = {"rid": "", "prompt": "hi", "max_tokens": MAX_TOKENS, "temperature": 0.0}
    limits = StreamLimits(idle_timeout_s=1.0, failover_timeout_s=1.0)
    job = EngineRun(
        "cmpl-drain", TARGET, GenerateRequest(**{**fields, **request}), limits, time.monotonic()
    )
    buffer = StreamBuffer(max_bytes=1 << 20)
    await pump(job, buffer, router)
    return buffer, job


async def _uninterrupted(**request: Any) -> str:
    buffer, _ = await _drained(DrainedDriver(drain_after=-1), **request)
    return buffer.take().text


async def test_a_draining_engines_stream_moves_on_at_its_next_token() -> None:
    expected = await _uninterrupted()
    draining, other = DrainedDriver(drain_after=3), GreedyDriver()
    before = _failovers("drained", "continued")
    buffer, job = await _drained(draining, other)
    taken = buffer.take()
    assert (taken.text, taken.finish_reason, taken.error) == (expected, "length", None)
    assert (buffer.prompt_tokens, buffer.completion_tokens) == (3, MAX_TOKENS)
    # Heard while its 4th token was on the way: the answer moves on after that one.
    assert other.requests[0].max_tokens == MAX_TOKENS - 4
    assert len(draining.aborted) == 1  # its request on the draining engine is ended
    assert (job.failovers, job.engine_name) == (1, "engine-1")
    assert _failovers("drained", "continued") == before + 1


async def test_a_stream_that_cannot_be_continued_finishes_on_the_draining_engine() -> None:
    penalised = {"options": GenerateOptions(presence_penalty=0.5)}
    expected = await _uninterrupted(**penalised)
    draining, other = DrainedDriver(drain_after=3), GreedyDriver()
    before = _failovers("drained", "penalties")
    buffer, job = await _drained(draining, other, **penalised)
    taken = buffer.take()
    assert (taken.text, taken.finish_reason, taken.error) == (expected, "length", None)
    assert other.requests == [] and draining.aborted == []
    assert (job.failovers, job.engine_name) == (0, "engine-0")
    assert _failovers("drained", "penalties") == before + 1  # counted once, not per token


async def test_with_no_other_engine_the_stream_reads_on_from_the_draining_one() -> None:
    expected = await _uninterrupted()
    before = _failovers("drained", "no_engine")
    buffer, job = await _drained(DrainedDriver(drain_after=3))
    taken = buffer.take()
    assert (taken.text, taken.finish_reason, taken.error) == (expected, "length", None)
    assert buffer.completion_tokens == MAX_TOKENS and job.failovers == 0
    assert _failovers("drained", "no_engine") == before + 1
