"""How the SGLang driver serves `n > 1`: as `n` single requests, merged (docs/engines.md).

`n > 1` is never sent to SGLang. The driver fans it out as `n` single requests, rids
`f"{rid}-{i}"`, merged into one stream whose chunks carry `index = i`, because:

- sglang#36894: `/unload_lora_adapter` has deadlocked the scheduler after parallel-
  sampling traffic (§9), and Loraplex unloads adapters all the time;
- SGLang replaces the rids of an `n > 1` request by random ones (and forgets ours), so
  `abort(rid)` could not reach it at all (§5).

Each sub-request keeps the caller's seed plus `i` (`seed + i`), so choice 0 is the single
request with that seed and the `n` choices differ even where SGLang honours seeds (only
with `--enable-deterministic-inference`; otherwise it ignores them). A streamed fan-out
starts choice 0 alone and the others once choice 0 streams (its prompt is then in the
prefix cache, so they do not prefill it again; SGLang's own `n > 1` waits for a prefill
the same way). Counts are billed the OpenAI way: the prompt once, completion tokens
summed over the choices, as a running total on every merged chunk. `abort(rid)` aborts
every sub-request by its own rid.

The functions here take the driver's single-request generation (`GenerateOne`) and abort
(`AbortOne`) as callables, so they know nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from loraplex.serving.engines.protocol import (
    ABORTED,
    EngineError,
    GenerateChunk,
    GenerateOptions,
    GenerateRequest,
)

#: The driver's generation of one single-choice request, as SGLang streams it.
GenerateOne = Callable[[GenerateRequest], AsyncIterator[GenerateChunk]]
#: The driver's abort of one live rid (exactly that rid, §5).
AbortOne = Callable[[str], Awaitable[None]]

replace = msgspec.structs.replace


def fan_out(request: GenerateRequest) -> list[GenerateRequest]:
    """The single-choice requests an `n`-choice request is sent as (module docstring).

    Choice `i` has rid `f"{rid}-{i}"` (each starts with the caller's rid and none is a
    prefix of another caller's) and seed `seed + i`, wrapped into SGLang's int64 range.
    """
    if request.choices == 1:
        return [request]
    options = replace(request.options or GenerateOptions(), n=1)
    return [
        replace(
            request,
            rid=f"{request.rid}-{i}",
            seed=None if request.seed is None else _int64(request.seed + i),
            options=options,
        )
        for i in range(request.choices)
    ]


def _int64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63


@dataclass
class FanOut:
    """A live fanned-out request: its sub-rids, and whether `abort` has stopped it."""

    rids: list[str]
    aborted: bool = False
    # Set once choice 0 streams (or ends, or `abort` came): the other choices may start.
    primed: asyncio.Event = field(default_factory=asyncio.Event)

    async def abort(self, abort_one: AbortOne) -> None:
        """Abort every sub-request by its own rid (SGLang wants each live rid exactly)."""
        self.aborted = True
        self.primed.set()  # choices not started yet start no more: they end as aborted
        await asyncio.gather(*(abort_one(one) for one in self.rids))


class _Usage:
    """Counts over the choices of a fan-out: the prompt once, completion tokens summed."""

    def __init__(self, choices: int) -> None:
        self.prompt_tokens: int | None = None
        self._completion: list[int | None] = [None] * choices

    def add(self, index: int, chunk: GenerateChunk) -> None:
        """Take the counts choice `index` reported on `chunk`."""
        if chunk.prompt_tokens is not None and self.prompt_tokens is None:
            self.prompt_tokens = chunk.prompt_tokens  # the same prompt for every choice
        if chunk.completion_tokens is not None:
            self._completion[index] = chunk.completion_tokens

    @property
    def completion_tokens(self) -> int | None:
        """Completion tokens over all choices so far; None while no choice reported any."""
        counts = [count for count in self._completion if count is not None]
        return sum(counts) if counts else None


async def merge_streams(
    parts: list[GenerateRequest],
    fan: FanOut,
    generate_one: GenerateOne,
    abort_one: AbortOne,
) -> AsyncIterator[GenerateChunk]:
    """The choices' streams as one: chunks in arrival order, each with its `index` and
    the counts over all choices so far. The first error ends it and stops the rest."""
    queue: asyncio.Queue[tuple[int, GenerateChunk | None, Exception | None]]
    queue = asyncio.Queue()

    async def pump(index: int, part: GenerateRequest) -> None:
        try:
            if index > 0:
                await fan.primed.wait()
            if fan.aborted:  # stopped before it started: it ends as aborted, unsent
                queue.put_nowait((index, GenerateChunk(finish_reason=ABORTED), None))
            else:
                stopped = False
                async for chunk in generate_one(part):
                    fan.primed.set()
                    queue.put_nowait((index, chunk, None))
                    if fan.aborted and not stopped and chunk.finish_reason is None:
                        # `abort` came while this one was being sent, before it could
                        # be reached: stop it now (its stream then ends as aborted).
                        stopped = True
                        with contextlib.suppress(EngineError):
                            await abort_one(part.rid)
        except Exception as exc:  # handed to the reader, which raises it
            queue.put_nowait((index, None, exc))
        else:
            queue.put_nowait((index, None, None))
        finally:
            fan.primed.set()

    usage = _Usage(len(parts))
    tasks = [asyncio.create_task(pump(i, part)) for i, part in enumerate(parts)]
    try:
        live = len(tasks)
        while live:
            index, chunk, error = await queue.get()
            if error is not None:
                raise error
            if chunk is None:
                live -= 1
                continue
            usage.add(index, chunk)
            yield replace(
                chunk,
                index=index,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def gather_whole(
    parts: list[GenerateRequest], generate_one: GenerateOne
) -> list[GenerateChunk]:
    """The choices of a non-streamed fan-out, sent at once: one chunk per choice in
    index order, the counts over all choices on the first (as `to_chunks` has them)."""
    tasks = [asyncio.create_task(_whole_one(generate_one, part)) for part in parts]
    try:
        chunks = await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # the first error leaves the others running: stop them
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    usage = _Usage(len(chunks))
    for index, chunk in enumerate(chunks):
        usage.add(index, chunk)
    merged = [
        replace(chunk, index=i, prompt_tokens=None, completion_tokens=None)
        for i, chunk in enumerate(chunks)
    ]
    merged[0] = replace(
        merged[0],
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
    )
    return merged


async def _whole_one(generate_one: GenerateOne, request: GenerateRequest) -> GenerateChunk:
    """The single chunk of one non-streamed, single-choice generation."""
    # Read to the end (one chunk), so the stream's context closes here, not at GC.
    chunks = [chunk async for chunk in generate_one(request)]
    return chunks[0]
