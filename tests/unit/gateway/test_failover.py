"""An engine failing after the first token: the answer goes on from another engine, exactly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.pump import EngineRun, StreamLimits, pump
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.observability import metrics
from loraplex.serving.engines import (
    EngineDied,
    GenerateChunk,
    GenerateOptions,
    GenerateRequest,
)
from loraplex.serving.registry import EngineHandle, EngineRegistry
from tests.support.driver_stubs import IdleEngineCalls

TARGET = Target(model="tiny", base_model="tiny", max_context=4096, base_source="/nowhere")
PROMPT_IDS = [101, 7, 42]  # what "hi" tokenises to on these engines
MAX_TOKENS = 8


def next_token(ids: list[int]) -> int:
    """The greedy next token: a function of every id before it, as a model's is."""
    return (sum(i * (p + 1) for p, i in enumerate(ids)) * 31 + len(ids)) % 997


class GreedyDriver(IdleEngineCalls):
    """An engine that answers greedily from token ids, returns them when asked, continues
    from them, and can die (or go silent) after some tokens."""

    kind = "vllm"
    continues_by_token_ids = True

    def __init__(
        self, *, die_after: int | None = None, silent_after: int | None = None, held: int = 0
    ):
        self.url = "http://greedy"
        self.die_after, self.silent_after = die_after, silent_after
        self.held = held  # the text of the first `held` tokens comes with the next one
        self.requests: list[GenerateRequest] = []
        self.aborted: list[str] = []

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        self.requests.append(request)
        ids = list(request.continue_ids or PROMPT_IDS)
        if request.want_token_ids and request.continue_ids is None:
            yield GenerateChunk(prompt_token_ids=PROMPT_IDS)  # the role chunk, before text
        budget = request.max_tokens or 16
        for n in range(budget):
            if n == self.die_after:
                raise EngineDied("connection reset by 10.0.0.7")
            if n == self.silent_after:
                await asyncio.sleep(30)
            token = next_token(ids)
            ids.append(token)
            await asyncio.sleep(0.001)
            text = (
                ""
                if n < self.held
                else "".join(f"w{t} " for t in ids[-1 - (n == self.held) * self.held :])
            )
            yield GenerateChunk(
                text,
                "length" if n == budget - 1 else None,
                len(ids) - n - 1,
                n + 1,
                token_ids=[token] if request.want_token_ids else None,
            )

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)


def _router(*drivers: Any) -> EngineRouter:
    registry = EngineRegistry()
    for i, driver in enumerate(drivers):
        registry.add(
            EngineHandle(
                id=f"e{i}", name=f"engine-{i}", url=driver.url, kind="vllm", base_model="tiny",
                max_lora_rank=64, gpu_slots=4, host_slots=8, driver=driver, healthy=True,
                in_flight=i,
            )
        )  # fmt: skip  # e0 is preferred: fewer in flight
    return EngineRouter(registry, cache=None)  # type: ignore[arg-type]  # base model only


async def _answer(*drivers: Any, **request: Any) -> tuple[StreamBuffer, EngineRun]:
    fields = {"rid": "", "prompt": "hi", "max_tokens": MAX_TOKENS, "temperature": 0.0}
    limits = StreamLimits(idle_timeout_s=0.2, failover_timeout_s=1.0)
    job = EngineRun(
        "cmpl-test", TARGET, GenerateRequest(**{**fields, **request}), limits, time.monotonic()
    )
    buffer = StreamBuffer(max_bytes=1 << 20)
    await pump(job, buffer, _router(*drivers))
    return buffer, job


def _failovers(reason: str, outcome: str) -> float:
    return metrics.FAILOVERS.labels(reason, outcome)._value.get()


@pytest.mark.parametrize("cut_after", [1, 4, MAX_TOKENS - 1])
async def test_an_answer_cut_by_a_dying_engine_ends_as_the_uninterrupted_one(
    cut_after: int,
) -> None:
    whole, _ = await _answer(GreedyDriver())
    expected = whole.take()
    second = GreedyDriver()
    before = _failovers("engine_died", "continued")
    buffer, job = await _answer(GreedyDriver(die_after=cut_after), second)
    taken = buffer.take()
    assert (taken.text, taken.finish_reason, taken.error) == (expected.text, "length", None)
    # Usage counts each token once: the continuation's prompt is not billed again.
    assert (buffer.prompt_tokens, buffer.completion_tokens) == (3, MAX_TOKENS)
    continued = second.requests[0]
    assert continued.max_tokens == MAX_TOKENS - cut_after
    assert continued.continue_ids is not None and len(continued.continue_ids) == 3 + cut_after
    assert (job.failovers, job.engine_name) == (1, "engine-1")
    assert _failovers("engine_died", "continued") == before + 1


async def test_tokens_whose_text_the_engine_held_back_are_generated_again() -> None:
    whole, _ = await _answer(GreedyDriver())
    second = GreedyDriver()
    buffer, _ = await _answer(GreedyDriver(die_after=2, held=3), second)
    assert buffer.take().text == whole.take().text
    assert second.requests[0].continue_ids == PROMPT_IDS  # nothing of the answer was sent
    assert buffer.completion_tokens == MAX_TOKENS


async def test_an_engine_silent_past_the_idle_timeout_is_continued_elsewhere() -> None:
    whole, _ = await _answer(GreedyDriver())
    silent = GreedyDriver(silent_after=3)
    buffer, _ = await _answer(silent, GreedyDriver())
    assert buffer.take().text == whole.take().text
    assert silent.aborted  # the silent engine's request is not left running


async def test_without_another_engine_the_stream_ends_with_engine_died_as_before() -> None:
    before = _failovers("engine_died", "no_engine")
    buffer, _ = await _answer(GreedyDriver(die_after=3))
    taken = buffer.take()
    assert taken.error is not None and taken.error[0] == "engine_died"
    assert "10.0.0.7" not in taken.error[1]  # the engine's address stays in the log
    assert len(taken.text.split()) == 3 and buffer.completion_tokens == 3
    assert _failovers("engine_died", "no_engine") == before + 1


WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize(
    "request_fields, reason",
    [
        ({"stop": ["w1"]}, "stop_strings"),
        ({"options": GenerateOptions(presence_penalty=0.5)}, "penalties"),
        ({"options": GenerateOptions(n=2)}, "many_choices"),
        (
            {"options": GenerateOptions(response_format={"type": "json_object"})},
            "structured_output",
        ),
        (  # a tool call cut mid-arguments would be parsed from its middle (docs/failover.md)
            {"options": GenerateOptions(tools=[WEATHER_TOOL], tool_choice="auto")},
            "tools",
        ),
    ],
)
async def test_an_answer_that_cannot_be_continued_exactly_ends_as_before(
    request_fields: dict[str, Any], reason: str
) -> None:
    second = GreedyDriver()
    buffer, _ = await _answer(GreedyDriver(die_after=3), second, **request_fields)
    taken = buffer.take()
    assert taken.error is not None and taken.error[0] == "engine_died"
    assert second.requests == [] and _failovers("engine_died", reason) >= 1


async def test_an_engine_that_dies_after_the_last_token_finishes_the_answer() -> None:
    whole, _ = await _answer(GreedyDriver())
    second = GreedyDriver()
    buffer, _ = await _answer(GreedyDriver(die_after=MAX_TOKENS), second, max_tokens=MAX_TOKENS)
    taken = buffer.take()
    assert (taken.text, taken.finish_reason) == (whole.take().text, "length")
    assert second.requests == []  # nothing was left to generate


async def test_the_gap_the_client_saw_is_measured() -> None:
    histogram = metrics.FAILOVER_GAP_SECONDS
    count = _sample(histogram, "_count")
    await _answer(GreedyDriver(die_after=2), GreedyDriver())
    assert _sample(histogram, "_count") == count + 1


def _sample(histogram: Any, suffix: str) -> float:
    return next(
        s.value for family in histogram.collect() for s in family.samples if s.name.endswith(suffix)
    )


def test_a_continuation_asks_for_the_tokens_left_with_the_same_sampling() -> None:
    from loraplex.gateway.continuation import Transcript, continuation_request

    request = GenerateRequest(rid="r", prompt="hi", max_tokens=10, temperature=0.7, seed=5)
    transcript = Transcript(prompt_ids=[1, 2], output_ids=[3, 4, 5], settled=3)
    continued = continuation_request(request, transcript, max_context=4096)
    expected = msgspec.structs.replace(
        request, continue_ids=[1, 2, 3, 4, 5], max_tokens=7, want_token_ids=True
    )
    assert continued == expected
