"""On the real SGLang engine: an answer continued from its token ids (what failover sends to
the next engine) equals the uninterrupted greedy answer, cut wherever it is cut.

A chat that wants ids runs on `/generate` from the prompt as the chat route renders it, so
its answer must also equal the chat route's. The development model's answer to the poem
starts with two tokens whose text SGLang holds back (half characters), so a cut there
continues from the prompt alone.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from loraplex.gateway.continuation import Transcript, continuation_request
from loraplex.serving.engines import GenerateChunk, GenerateRequest
from loraplex.serving.engines.sglang import SglangDriver
from tests.support.engine import RunningEngine

pytestmark = pytest.mark.engine
TOKENS = 24
PROMPTS = ["Once upon a time", "Write a poem about the sea."]
CUTS = [1, TOKENS // 2, TOKENS - 2]


@pytest.fixture
async def sglang(sglang_engine: RunningEngine) -> AsyncIterator[SglangDriver]:
    driver = SglangDriver(sglang_engine.url)
    yield driver
    await driver.aclose()


@pytest.fixture
async def adapter(sglang: SglangDriver, adapter_dirs: dict[int, Path]) -> AsyncIterator[str]:
    name = f"cont-{uuid.uuid4().hex[:12]}"
    await sglang.load(name, adapter_dirs[8])
    yield name
    await sglang.unload(name)


async def _chunks(driver: SglangDriver, request: GenerateRequest) -> list[GenerateChunk]:
    request = msgspec.structs.replace(request, rid=uuid.uuid4().hex)
    return [chunk async for chunk in driver.generate(request)]


def _text(chunks: list[GenerateChunk]) -> str:
    return "".join(chunk.text for chunk in chunks)


def _chat(prompt: str, adapter: str | None = None) -> GenerateRequest:
    messages = [{"role": "user", "content": prompt}]
    return GenerateRequest(
        rid="",
        adapter=adapter,
        messages=messages,
        max_tokens=TOKENS,
        temperature=0.0,
        want_token_ids=True,
    )


async def _continued_after(driver: SglangDriver, ask: GenerateRequest, cut_after: int) -> None:
    """Cut the answer to `ask` after `cut_after` engine chunks, continue it from its ids on
    the engine, and check the client's text and finish equal the uninterrupted answer's."""
    whole = await _chunks(driver, ask)
    assert sum(len(chunk.token_ids or ()) for chunk in whole) == TOKENS
    transcript, sent = Transcript(), ""  # what the gateway had when the engine died
    for chunk in whole[:cut_after]:
        transcript.record(chunk)
        sent += chunk.text
    assert transcript.prompt_ids, "SGLang sent no prompt token ids"
    continued = await _chunks(driver, continuation_request(ask, transcript, max_context=4096))
    answer = _text(whole)
    assert sent + _text(continued) == answer != ""
    finishes = [c.finish_reason for c in continued if c.finish_reason]
    assert finishes == [next(c.finish_reason for c in whole if c.finish_reason)]
    tokens = sum(len(chunk.token_ids or ()) for chunk in continued)
    assert tokens == TOKENS - transcript.tokens  # the held-back tokens generated again


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("cut_after", CUTS)
async def test_a_chat_continued_from_its_token_ids_equals_the_uninterrupted_one(
    sglang: SglangDriver, cut_after: int, prompt: str
) -> None:
    await _continued_after(sglang, _chat(prompt), cut_after)


@pytest.mark.parametrize("cut_after", CUTS)
async def test_a_completion_continued_from_its_token_ids_equals_the_uninterrupted_one(
    sglang: SglangDriver, cut_after: int
) -> None:
    ask = GenerateRequest(
        rid="", prompt=PROMPTS[0], max_tokens=TOKENS, temperature=0.0, want_token_ids=True
    )
    await _continued_after(sglang, ask, cut_after)


@pytest.mark.parametrize("cut_after", [1, TOKENS // 2])
async def test_an_adapters_answer_is_continued_on_the_adapter(
    sglang: SglangDriver, adapter: str, cut_after: int
) -> None:
    on_base = _text(await _chunks(sglang, _chat(PROMPTS[1])))
    assert _text(await _chunks(sglang, _chat(PROMPTS[1], adapter))) != on_base
    await _continued_after(sglang, _chat(PROMPTS[1], adapter), cut_after)


@pytest.mark.parametrize("prompt", PROMPTS)
async def test_a_chat_asking_for_ids_answers_as_the_chat_route_does(
    sglang: SglangDriver, prompt: str
) -> None:
    with_ids = await _chunks(sglang, _chat(prompt))
    plain = await _chunks(sglang, msgspec.structs.replace(_chat(prompt), want_token_ids=False))
    assert _text(with_ids) == _text(plain) != ""
    assert with_ids[-1].finish_reason == plain[-1].finish_reason
    usage = (with_ids[-1].prompt_tokens, with_ids[-1].completion_tokens)
    assert usage == (plain[-1].prompt_tokens, plain[-1].completion_tokens)
