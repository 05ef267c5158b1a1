"""The SGLang driver's token-id wire for failover (docs/engines.md §5, docs/failover.md).

A request that wants ids goes to `/generate` asking for the prompt's ids (a chat rendered to
ids by `/v1/tokenize` first, since the chat route streams none); a continuation sends its
ids as `input_ids`. Each test scripts SGLang 0.5.23's answer (cumulative `text` and
`output_ids`, the prompt's ids on every event, as seen live) and checks what was sent and
what the driver made of it.
"""

from __future__ import annotations

import httpx
import pytest

from loraplex.serving.engines import (
    EngineRejected,
    GenerateChunk,
    GenerateOptions,
    GenerateRequest,
    SglangDriver,
)

MODELS = {"object": "list", "data": [{"id": "base", "object": "model", "parent": None}]}
CHAT = [{"role": "user", "content": "hi"}]
PROMPT_IDS = [1, 624, 201, 885, 201]


def event(text: str, ids: list[int], finish: str | None = None) -> dict:
    """One `/generate` event of a request that asked for the prompt's ids."""
    return {
        "text": text,
        "output_ids": ids,
        "meta_info": {
            "id": "r1",
            "finish_reason": {"type": finish} if finish else None,
            "prompt_tokens": len(PROMPT_IDS),
            "completion_tokens": len(ids),
        },
        "prompt_token_ids": PROMPT_IDS,
    }


# The first token is half a character: its text comes with the second (seen live).
EVENTS = [event("", [969]), event(" Bor", [969, 734]), event(" Bor un", [969, 734, 88], "length")]


@pytest.fixture
def driver(fake_engine) -> SglangDriver:
    fake_engine.on("GET", "/v1/models", httpx.Response(200, json=MODELS))
    fake_engine.on("POST", "/v1/tokenize", httpx.Response(200, json={"tokens": PROMPT_IDS}))
    body = fake_engine.sse(*EVENTS, b"[DONE]")
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    return SglangDriver("http://engine.test", client=fake_engine.client())


async def collect(driver: SglangDriver, request: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in driver.generate(request)]


def chat(**fields) -> GenerateRequest:
    return GenerateRequest(rid="r1", adapter="ad-v1", messages=CHAT, want_token_ids=True, **fields)


def test_the_driver_says_it_continues_by_token_ids(driver):
    assert driver.continues_by_token_ids is True


async def test_a_chat_wanting_ids_is_rendered_by_the_engine_and_sent_to_generate_as_ids(
    driver, fake_engine
):
    await collect(driver, chat(max_tokens=8, temperature=0.0))
    assert fake_engine.sent("/v1/tokenize") == {"model": "base", "messages": CHAT}
    assert fake_engine.sent("/generate") == {
        "rid": "r1", "input_ids": PROMPT_IDS, "stream": True, "lora_path": "ad-v1",
        "return_prompt_token_ids": True,
        "sampling_params": {"max_new_tokens": 8, "temperature": 0.0},
    }  # fmt: skip
    assert "/v1/chat/completions" not in fake_engine.paths()


async def test_a_chat_without_max_tokens_runs_to_the_context_as_on_the_chat_route(
    driver, fake_engine
):
    await collect(driver, chat())
    assert fake_engine.sent("/generate")["sampling_params"] == {"max_new_tokens": None}


async def test_a_template_that_renders_tools_gets_them(driver, fake_engine):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    await collect(driver, chat(options=GenerateOptions(tools=tools, tool_choice="none")))
    assert fake_engine.sent("/v1/tokenize") == {
        "model": "base", "messages": CHAT, "tools": tools, "tool_choice": "none",
    }  # fmt: skip


async def test_each_chunk_carries_its_new_output_ids_and_the_first_the_prompts(driver):
    chunks = await collect(driver, chat())
    assert [(c.text, c.token_ids) for c in chunks] == [
        ("", [969]),  # ids whose text is held back still arrive
        (" Bor", [734]),
        (" un", [88]),
    ]
    assert [c.prompt_token_ids for c in chunks] == [PROMPT_IDS, None, None]
    assert (chunks[-1].finish_reason, chunks[-1].completion_tokens) == ("length", 3)


async def test_a_continuation_sends_its_ids_and_renders_nothing(driver, fake_engine):
    ids = [*PROMPT_IDS, 969, 734]
    await collect(driver, chat(continue_ids=ids, max_tokens=1))
    sent = fake_engine.sent("/generate")
    assert (sent["input_ids"], sent["sampling_params"]) == (ids, {"max_new_tokens": 1})
    assert "text" not in sent
    assert "/v1/tokenize" not in fake_engine.paths()


async def test_a_completion_wanting_ids_sends_its_text_and_asks_for_the_prompts_ids(
    driver, fake_engine
):
    request = GenerateRequest(rid="r1", prompt="Once", max_tokens=3, want_token_ids=True)
    chunks = await collect(driver, request)
    sent = fake_engine.sent("/generate")
    assert (sent["text"], sent["return_prompt_token_ids"]) == ("Once", True)
    assert "input_ids" not in sent
    assert [c.token_ids for c in chunks] == [[969], [734], [88]]


async def test_requests_wanting_no_ids_are_unchanged(driver, fake_engine):
    choice = {"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}
    answer = {"id": "r1", "object": "chat.completion.chunk", "model": "base", "choices": [choice]}
    body = fake_engine.sse(answer, b"[DONE]")
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    (chunk,) = await collect(driver, GenerateRequest(rid="r1", messages=CHAT))
    assert (chunk.text, chunk.token_ids) == ("a", None)
    assert "/v1/tokenize" not in fake_engine.paths()
    chunks = await collect(driver, GenerateRequest(rid="r2", prompt="Once"))
    assert "return_prompt_token_ids" not in fake_engine.sent("/generate")
    assert [c.text for c in chunks] == [" Bor", " un"]  # no id-only chunk, no ids
    assert all(c.token_ids is None for c in chunks)


async def test_an_unstreamed_chat_wanting_ids_gets_them_whole(driver, fake_engine):
    fake_engine.on("POST", "/generate", httpx.Response(200, json=EVENTS[-1]))
    (chunk,) = await collect(driver, chat(stream=False))
    assert (chunk.text, chunk.token_ids, chunk.prompt_token_ids) == (
        " Bor un",
        [969, 734, 88],
        PROMPT_IDS,
    )


async def test_a_chat_the_engine_cannot_render_is_refused_with_its_message(driver, fake_engine):
    refusal = {"object": "error", "message": "messages: bad role", "code": 400}
    fake_engine.on("POST", "/v1/tokenize", httpx.Response(400, json=refusal))
    with pytest.raises(EngineRejected, match="bad role") as raised:
        await collect(driver, chat())
    assert raised.value.status_code == 400
    assert "/generate" not in fake_engine.paths()
