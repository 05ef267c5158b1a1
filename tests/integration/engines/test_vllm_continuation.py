"""On the real vLLM engine: an answer continued from its token ids (what failover sends to the
next engine) equals the uninterrupted greedy answer, cut wherever it is cut.

The development model's greedy answer starts with half a character, so vLLM holds the text
back while it sends the ids: the continuation must start where the text sent ends.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import msgspec
import pytest

from loraplex.gateway.continuation import Transcript, continuation_request
from loraplex.serving.engines import GenerateChunk, GenerateRequest, make_driver
from loraplex.serving.engines.vllm import VllmDriver
from tests.support.engine import RunningEngine

pytestmark = pytest.mark.engine
TOKENS = 24
# The second answer has text held back mid-answer (10 of its first 12 tokens' text sent).
PROMPTS = ["Once upon a time", "Write a poem about the sea."]


@pytest.fixture
async def vllm(vllm_engine: RunningEngine) -> AsyncIterator[VllmDriver]:
    driver = make_driver("vllm", vllm_engine.url)
    assert isinstance(driver, VllmDriver)
    yield driver
    await driver.aclose()


async def _chunks(driver: VllmDriver, request: GenerateRequest) -> list[GenerateChunk]:
    request = msgspec.structs.replace(request, rid=uuid.uuid4().hex)
    return [chunk async for chunk in driver.generate(request)]


def _ask(prompt: str) -> GenerateRequest:
    messages = [{"role": "user", "content": prompt}]
    return GenerateRequest(
        rid="", messages=messages, max_tokens=TOKENS, temperature=0.0, want_token_ids=True
    )


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("cut_after", [1, TOKENS // 2, TOKENS - 2])
async def test_an_answer_continued_from_its_token_ids_equals_the_uninterrupted_one(
    vllm: VllmDriver, cut_after: int, prompt: str
) -> None:
    ask = _ask(prompt)
    whole = await _chunks(vllm, ask)
    transcript, sent = Transcript(), ""  # what the gateway had when the engine died
    for chunk in whole[: cut_after + 1]:  # the role chunk (the prompt's ids), then tokens
        transcript.record(chunk)
        sent += chunk.text
    assert transcript.prompt_ids, "vLLM sent no prompt token ids"
    assert transcript.settled > 0 or cut_after == 1  # continued from the answer's ids
    continued = await _chunks(vllm, continuation_request(ask, transcript, max_context=2048))
    answer = "".join(c.text for c in whole)
    assert sent + "".join(c.text for c in continued) == answer != ""
    finishes = [c.finish_reason for c in continued if c.finish_reason]
    assert finishes == [next(c.finish_reason for c in whole if c.finish_reason)]
