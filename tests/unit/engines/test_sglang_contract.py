"""The SGLang driver against the shapes in docs/engines.md (section in brackets).

Each test scripts the documented response, then checks the exact JSON the driver sent and
what it made of the answer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from loraplex.serving.engines import (
    ABORTED,
    AdapterNotLoaded,
    EngineDied,
    EngineLoad,
    EngineRejected,
    GenerateChunk,
    GenerateOptions,
    GenerateRequest,
    SglangDriver,
)
from loraplex.serving.engines.sglang import sglang_model, with_usage_on_finish
from loraplex.serving.engines.sglang_fanout import fan_out

MODELS = {
    "object": "list",
    "data": [
        {"id": "base", "object": "model", "root": "/models/base", "parent": None},
        {"id": "ad-v1", "object": "model", "root": "/cache/ad-v1", "parent": "base"},
    ],
}
CHAT = [{"role": "user", "content": "hi"}]


def update_output(success: bool, loaded: dict[str, str], error: str | None = None) -> dict:
    """`LoRAUpdateOutput` as `msgspec_to_builtins` renders it [2.1]."""
    return {
        "rid": None,
        "http_worker_ipc": None,
        "success": success,
        "error_message": error,
        "loaded_adapters": loaded,
    }


def generate_event(text: str, finish: str | None = None, completion_tokens: int = 1) -> dict:
    """One `/generate` output with cumulative `text` [5]."""
    return {
        "text": text,
        "output_ids": [],
        "meta_info": {
            "id": "r1",
            "finish_reason": {"type": finish} if finish else None,
            "prompt_tokens": 3,
            "completion_tokens": completion_tokens,
            "cached_tokens": 0,
        },
    }


def chat_chunk(content: str | None, finish: str | None = None) -> dict:
    """An OpenAI chat completion chunk [5]."""
    delta = {"content": content} if content is not None else {"role": "assistant"}
    return {
        "id": "r1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "base:ad-v1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


@pytest.fixture
def driver(fake_engine) -> SglangDriver:
    """A driver whose HTTP client talks to the fake engine."""
    fake_engine.on("GET", "/v1/models", httpx.Response(200, json=MODELS))
    return SglangDriver("http://engine.test", client=fake_engine.client())


async def collect(driver: SglangDriver, request: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in driver.generate(request)]


async def test_load_sends_name_path_and_pinned(driver, fake_engine):
    fake_engine.on(
        "POST",
        "/load_lora_adapter",
        httpx.Response(200, json=update_output(True, {"ad-v1": "/cache/ad-v1"})),
    )
    await driver.load("ad-v1", Path("/cache/ad-v1"), pinned=True)
    assert fake_engine.sent("/load_lora_adapter") == {
        "lora_name": "ad-v1", "lora_path": "/cache/ad-v1", "pinned": True,
    }  # fmt: skip


async def test_load_of_a_name_already_loaded_from_the_same_path_succeeds(driver, fake_engine):
    error = "Failed to load LoRA adapter ad-v1 because it is already loaded"
    body = update_output(False, {"ad-v1": "/cache/ad-v1"}, error)
    fake_engine.on("POST", "/load_lora_adapter", httpx.Response(400, json=body))
    await driver.load("ad-v1", Path("/cache/ad-v1"))


async def test_load_of_a_name_taken_by_another_path_is_rejected(driver, fake_engine):
    error = "Failed to load LoRA adapter ad-v1 because it is already loaded"
    body = update_output(False, {"ad-v1": "/elsewhere"}, error)
    fake_engine.on("POST", "/load_lora_adapter", httpx.Response(400, json=body))
    with pytest.raises(EngineRejected, match="already loaded"):
        await driver.load("ad-v1", Path("/cache/ad-v1"))


async def test_load_over_the_pool_rank_carries_the_engine_message(driver, fake_engine):
    error = "LoRA adapter big with rank 128 is incompatible with the current LoRA memory pool"
    fake_engine.on(
        "POST", "/load_lora_adapter", httpx.Response(400, json=update_output(False, {}, error))
    )
    with pytest.raises(EngineRejected, match="rank 128 is incompatible") as raised:
        await driver.load("big", Path("/cache/big"))
    assert raised.value.engine_status == 400


async def test_load_answered_by_a_plain_500_is_rejected(driver, fake_engine):
    fake_engine.on("POST", "/load_lora_adapter", httpx.Response(500, text="AssertionError"))
    with pytest.raises(EngineRejected, match="AssertionError") as raised:
        await driver.load("ad-v1", Path("/cache/ad-v1"))
    assert raised.value.engine_status == 500


async def test_unload_sends_only_the_name(driver, fake_engine):
    fake_engine.on(
        "POST", "/unload_lora_adapter", httpx.Response(200, json=update_output(True, {}))
    )
    await driver.unload("ad-v1")
    assert fake_engine.sent("/unload_lora_adapter") == {"lora_name": "ad-v1"}


async def test_unload_of_an_unknown_name_is_a_no_op(driver, fake_engine):
    error = "LoRA with name ghost does not exist. Loaded LoRAs: ad-v1"
    body = update_output(False, {"ad-v1": "/cache/ad-v1"}, error)
    fake_engine.on("POST", "/unload_lora_adapter", httpx.Response(400, json=body))
    await driver.unload("ghost")


async def test_unload_of_an_unknown_name_answered_with_null_adapters_is_a_no_op(
    driver, fake_engine
):
    """Live 0.5.23 answers a failed unload with `"loaded_adapters": null`."""
    body = update_output(False, {}, "LoRA with name ghost does not exist. Loaded LoRAs: []")
    body["loaded_adapters"] = None
    fake_engine.on("POST", "/unload_lora_adapter", httpx.Response(400, json=body))
    await driver.unload("ghost")


async def test_unload_that_fails_part_way_is_rejected(driver, fake_engine):
    error = "ad-v1 has an incomplete unload. Retry the unload"
    fake_engine.on(
        "POST", "/unload_lora_adapter", httpx.Response(400, json=update_output(False, {}, error))
    )
    with pytest.raises(EngineRejected, match="incomplete unload"):
        await driver.unload("ad-v1")


async def test_loaded_adapters_are_the_model_cards_with_a_parent(driver):
    assert await driver.list_loaded() == {"ad-v1"}


def test_an_adapter_is_selected_as_base_colon_name_never_bare():
    assert sglang_model("base", "ad-v1") == "base:ad-v1"
    assert sglang_model("base", None) == "base"
    with pytest.raises(ValueError):
        sglang_model("base", "")


async def test_chat_names_the_adapter_in_model_and_lora_path_with_our_rid(driver, fake_engine):
    body = fake_engine.sse(chat_chunk(None), chat_chunk("Hi"), chat_chunk("!", "stop"), b"[DONE]")
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    request = GenerateRequest(
        rid="r1", adapter="ad-v1", messages=CHAT, max_tokens=8, temperature=0.0
    )
    await collect(driver, request)
    assert fake_engine.sent("/v1/chat/completions") == {
        "model": "base:ad-v1", "messages": CHAT, "max_tokens": 8, "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "lora_path": "ad-v1", "rid": "r1",
    }  # fmt: skip


async def test_chat_on_the_base_model_names_no_adapter(driver, fake_engine):
    body = fake_engine.sse(chat_chunk("x", "stop"), b"[DONE]")
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    await collect(driver, GenerateRequest(rid="r1", messages=CHAT))
    sent = fake_engine.sent("/v1/chat/completions")
    assert sent["model"] == "base"
    assert "lora_path" not in sent


async def test_chat_stream_puts_the_usage_that_follows_the_finish_on_the_finish(
    driver, fake_engine
):
    """Live 0.5.23: usage comes in its own chunk after `finish_reason`; readers stop at the
    finish, so the driver carries the counts on the finish chunk."""
    usage = {
        "id": "r1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    body = fake_engine.sse(
        chat_chunk(None), chat_chunk("Hi"), chat_chunk("!", "stop"), usage, b"[DONE]"
    )
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    chunks = await collect(driver, GenerateRequest(rid="r1", adapter="ad-v1", messages=CHAT))
    assert chunks == [GenerateChunk("Hi"), GenerateChunk("!", "stop", 3, 2)]


async def test_chat_validation_error_is_a_real_400(driver, fake_engine):
    error = {
        "object": "error",
        "message": "max_tokens is too large",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(400, json=error))
    with pytest.raises(EngineRejected, match="max_tokens is too large") as raised:
        await collect(driver, GenerateRequest(rid="r1", messages=CHAT))
    assert raised.value.engine_status == 400


async def test_chat_error_event_mid_stream_raises_the_engine_message(driver, fake_engine):
    error = {"object": "error", "message": "scheduler failed", "code": 500}
    body = fake_engine.sse(chat_chunk("Hi"), error, b"[DONE]")
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    with pytest.raises(EngineRejected, match="scheduler failed"):
        await collect(driver, GenerateRequest(rid="r1", messages=CHAT))


async def test_completion_uses_native_generate_with_lora_path(driver, fake_engine):
    body = fake_engine.sse(generate_event("a", "stop"), b"[DONE]")
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    request = GenerateRequest(
        rid="r1",
        adapter="ad-v1",
        prompt="Once",
        max_tokens=4,
        temperature=0.0,
        top_p=0.9,
        stop=["\n"],
    )
    await collect(driver, request)
    assert fake_engine.sent("/generate") == {
        "rid": "r1", "text": "Once", "stream": True, "lora_path": "ad-v1",
        "sampling_params": {"max_new_tokens": 4, "temperature": 0.0, "top_p": 0.9, "stop": ["\n"]},
    }  # fmt: skip


async def test_completion_on_the_base_model_sends_no_lora_path(driver, fake_engine):
    body = fake_engine.sse(generate_event("a", "stop"), b"[DONE]")
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    await collect(driver, GenerateRequest(rid="r1", prompt="Once"))
    assert "lora_path" not in fake_engine.sent("/generate")


async def test_cumulative_generate_text_becomes_deltas(driver, fake_engine):
    body = fake_engine.sse(
        generate_event("Once", None, 1),
        generate_event("Once upon", None, 2),
        generate_event("Once upon a", "length", 3),
        b"[DONE]",
    )
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    chunks = await collect(driver, GenerateRequest(rid="r1", prompt="x"))
    assert [chunk.text for chunk in chunks] == ["Once", " upon", " a"]
    assert chunks[-1] == GenerateChunk(" a", "length", 3, 3)


async def test_generate_error_event_for_a_never_loaded_adapter(driver, fake_engine):
    error = {
        "error": {
            "message": "Got LoRA adapter that has never been loaded: ad-v9\n"
            "All loaded adapters: ad-v1",
            "type": "invalid_request_error",
            "code": 400,
            "retryable": False,
        }
    }
    body = fake_engine.sse(error, b"[DONE]")
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    with pytest.raises(AdapterNotLoaded) as raised:
        await collect(driver, GenerateRequest(rid="r1", adapter="ad-v9", prompt="x"))
    assert raised.value.adapter == "ad-v9"


async def test_generate_error_event_otherwise_is_rejected_with_its_message(driver, fake_engine):
    error = {
        "error": {
            "message": "Input is too long",
            "type": "invalid_request_error",
            "code": 400,
            "retryable": False,
        }
    }
    fake_engine.on("POST", "/generate", httpx.Response(200, content=fake_engine.sse(error)))
    with pytest.raises(EngineRejected, match="Input is too long"):
        await collect(driver, GenerateRequest(rid="r1", prompt="x"))


async def test_unstreamed_generate_400_never_loaded_is_adapter_not_loaded(driver, fake_engine):
    error = {"error": {"message": "Got LoRA adapter that has never been loaded: ad-v9"}}
    fake_engine.on("POST", "/generate", httpx.Response(400, json=error))
    with pytest.raises(AdapterNotLoaded):
        await collect(driver, GenerateRequest(rid="r1", adapter="ad-v9", prompt="x", stream=False))


async def test_unstreamed_generate_returns_text_and_counts(driver, fake_engine):
    fake_engine.on("POST", "/generate", httpx.Response(200, json=generate_event("done", "stop", 2)))
    chunks = await collect(driver, GenerateRequest(rid="r1", prompt="x", stream=False))
    assert chunks == [GenerateChunk("done", "stop", 3, 2)]
    assert fake_engine.sent("/generate")["stream"] is False


async def test_abort_posts_the_rid_and_ends_the_open_stream(driver, fake_engine):
    held = fake_engine.held(fake_engine.sse(generate_event("Once", None, 1)))
    fake_engine.on("POST", "/generate", httpx.Response(200, stream=held))
    fake_engine.on("POST", "/abort_request", httpx.Response(200))
    chunks: list[GenerateChunk] = []

    streaming = asyncio.Event()

    async def consume() -> None:
        try:
            async for chunk in driver.generate(GenerateRequest(rid="r1", prompt="x")):
                chunks.append(chunk)
                if len(chunks) >= 1:
                    streaming.set()
        finally:
            streaming.set()

    reader = asyncio.create_task(consume())
    await streaming.wait()
    await driver.abort("r1")
    await reader
    assert fake_engine.sent("/abort_request") == {"rid": "r1", "abort_all": False}
    assert chunks[-1].finish_reason == ABORTED


async def test_abort_of_an_unknown_rid_is_fine(driver, fake_engine):
    fake_engine.on("POST", "/abort_request", httpx.Response(200))
    await driver.abort("gone")
    assert fake_engine.sent("/abort_request") == {"rid": "gone", "abort_all": False}


async def test_stream_cut_before_finishing_is_an_engine_death(driver, fake_engine):
    body = fake_engine.sse(generate_event("Once", None, 1))  # no finish, no [DONE]
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    with pytest.raises(EngineDied):
        await collect(driver, GenerateRequest(rid="r1", prompt="x"))


async def test_health_is_200_and_503_while_starting(driver, fake_engine):
    fake_engine.on("GET", "/health", httpx.Response(200))
    assert (await driver.health()).healthy
    fake_engine.on("GET", "/health", httpx.Response(503))
    assert not (await driver.health()).healthy


async def test_metrics_are_summed_by_name(driver, fake_engine):
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="base",tp_rank="0"} 2.0\n'
        'sglang:num_running_reqs{model_name="base",tp_rank="1"} 1.0\n'
        "# TYPE sglang:lora_pool_slots_total gauge\n"
        'sglang:lora_pool_slots_total{model_name="base"} 8.0\n'
    )
    fake_engine.on("GET", "/metrics", httpx.Response(200, text=text))
    metrics = await driver.metrics()
    assert metrics["sglang:num_running_reqs"] == 3.0
    assert metrics["sglang:lora_pool_slots_total"] == 8.0


async def test_queue_depth_is_the_schedulers_live_count_from_v1_loads(driver, fake_engine):
    """Live 0.5.23: /metrics gauges lag a starting request; /v1/loads does not."""
    loads = {"version": "0.5.23", "loads": [
        {"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1, "token_usage": 0.1},
        {"dp_rank": 1, "num_running_reqs": 1, "num_waiting_reqs": 0, "token_usage": 0.0},
    ]}  # fmt: skip
    fake_engine.on("GET", "/v1/loads", httpx.Response(200, json=loads))
    assert await driver.queue_depth() == EngineLoad(running=3, waiting=1)


async def test_queue_depth_falls_back_to_the_gauges_without_v1_loads(driver, fake_engine):
    text = "sglang:num_running_reqs 4.0\nsglang:num_queue_reqs 2.0\n"
    fake_engine.on("GET", "/v1/loads", httpx.Response(404, json={"detail": "Not Found"}))
    fake_engine.on("GET", "/metrics", httpx.Response(200, text=text))
    assert await driver.queue_depth() == EngineLoad(running=4, waiting=2)


async def test_an_api_key_is_sent_as_a_bearer_token(fake_engine):
    fake_engine.on("POST", "/abort_request", httpx.Response(200))
    driver = SglangDriver("http://engine.test", api_key="k1", client=fake_engine.client())
    await driver.abort("r1")
    assert fake_engine.requests[-1].headers["authorization"] == "Bearer k1"


async def test_a_finish_with_no_usage_after_it_is_still_delivered(driver, fake_engine):
    """`include_usage` off (or a stream aborted at its end): the finish chunk is not lost."""
    body = fake_engine.sse(chat_chunk("Hi"), chat_chunk("!", "stop"), b"[DONE]")
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    request = GenerateRequest(rid="r1", adapter="ad-v1", messages=CHAT, include_usage=False)
    chunks = await collect(driver, request)
    assert chunks == [GenerateChunk("Hi"), GenerateChunk("!", "stop")]


# --- OpenAI options [11] ------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
JSON_SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "reply", "schema": SCHEMA, "strict": True},
}


def sglang_chat_chunk(
    index: int = 0,
    *,
    content: str | None = None,
    tool_calls: list[dict] | None = None,
    logprobs: dict | None = None,
    finish: str | None = None,
    usage: dict | None = None,
) -> dict:
    """A chat chunk as 0.5.23 encodes it (`sse_utils.StreamChunk`, or pydantic's dump for
    tool calls): nulls included [11]."""
    delta: dict = {"reasoning_content": None}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta = {"role": None, "content": None, "reasoning_content": None,
                 "tool_calls": tool_calls}  # fmt: skip
    chunk = {
        "id": "r1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "base:ad-v1",
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                     "finish_reason": finish, "matched_stop": None}],
    }  # fmt: skip
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def usage_chunk(prompt: int, completion: int) -> dict:
    """The `choices: []` chunk that ends a chat stream with its usage [6]."""
    return {
        "id": "r1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "base:ad-v1",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    }  # fmt: skip


def logprob_generate_event(
    text: str,
    tokens: list[tuple[float, int, str]],
    tops: list[list[tuple[float, int, str]]] | None = None,
    finish: str | None = None,
) -> dict:
    """A `/generate` event with `return_logprob`: the logprobs so far, cumulative [11]."""
    event = generate_event(text, finish, len(tokens))
    event["meta_info"]["input_token_logprobs"] = []
    event["meta_info"]["output_token_logprobs"] = [list(token) for token in tokens]
    event["meta_info"]["output_token_logprobs_length"] = len(tokens)
    if tops is not None:
        event["meta_info"]["output_top_logprobs"] = [
            [list(alt) for alt in position] for position in tops
        ]
    return event


def sent_bodies(fake_engine, path: str) -> dict[str, dict]:
    """Every JSON body sent to `path`, by its rid."""
    bodies = [json.loads(r.content) for r in fake_engine.requests if r.url.path == path]
    return {body["rid"]: body for body in bodies}


def by_rid(responses: dict[str, httpx.Response]):
    """A handler answering each request with the response scripted for its rid."""

    def handle(request: httpx.Request) -> httpx.Response:
        return responses[json.loads(request.content)["rid"]]

    return handle


async def test_chat_sends_every_option_under_its_openai_name(driver, fake_engine):
    """0.5.23's ChatCompletionRequest takes OpenAI's names and formats as they are."""
    body = fake_engine.sse(sglang_chat_chunk(content="x"), sglang_chat_chunk(finish="stop"),
                           usage_chunk(3, 1), b"[DONE]")  # fmt: skip
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    options = GenerateOptions(
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        logit_bias={"42": -100.0, "7": 5.0},
        logprobs=True,
        top_logprobs=3,
        response_format=JSON_SCHEMA_FORMAT,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
    )
    request = GenerateRequest(
        rid="r1", adapter="ad-v1", messages=CHAT, seed=7, options=options, stream=False
    )
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, json=WHOLE_TOOL_REPLY))
    await collect(driver, request)
    assert fake_engine.sent("/v1/chat/completions") == {
        "model": "base:ad-v1", "messages": CHAT, "seed": 7,
        "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "logit_bias": {"42": -100.0, "7": 5.0},
        "logprobs": True, "top_logprobs": 3,
        "response_format": JSON_SCHEMA_FORMAT,
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "stream": False,
        "lora_path": "ad-v1", "rid": "r1",
    }  # fmt: skip


async def test_chat_json_object_goes_as_it_is(driver, fake_engine):
    """SGLang's chat route itself turns json_object into json_schema {"type": "object"}."""
    body = fake_engine.sse(sglang_chat_chunk(content="{}", finish="stop"), b"[DONE]")
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    options = GenerateOptions(response_format={"type": "json_object"}, tool_choice="auto")
    await collect(driver, GenerateRequest(rid="r1", messages=CHAT, options=options))
    sent = fake_engine.sent("/v1/chat/completions")
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["tool_choice"] == "auto"
    assert "n" not in sent


WHOLE_TOOL_REPLY = {
    "id": "r1", "object": "chat.completion", "created": 1, "model": "base",
    "choices": [{"index": 0,
                 "message": {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "call_0", "index": 0, "type": "function",
                      "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                 "finish_reason": "tool_calls"}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15},
}  # fmt: skip


async def test_a_streamed_chat_offering_tools_runs_whole_upstream(driver, fake_engine):
    """SGLang's streaming tool parser can drop a call's arguments [11.1]: the driver asks
    for the whole reply and streams it, so the call arrives with its arguments."""
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, json=WHOLE_TOOL_REPLY))
    options = GenerateOptions(tools=[WEATHER_TOOL])
    chunks = await collect(driver, GenerateRequest(rid="r1", messages=CHAT, options=options))
    assert fake_engine.sent("/v1/chat/completions")["stream"] is False
    [chunk] = chunks
    assert chunk.tool_calls == WHOLE_TOOL_REPLY["choices"][0]["message"]["tool_calls"]
    assert (chunk.finish_reason, chunk.prompt_tokens, chunk.completion_tokens) == (
        "tool_calls", 9, 6,
    )  # fmt: skip


async def test_a_streamed_chat_with_tool_choice_none_still_streams(driver, fake_engine):
    body = fake_engine.sse(sglang_chat_chunk(content="Hi"), sglang_chat_chunk(finish="stop"),
                           usage_chunk(3, 1), b"[DONE]")  # fmt: skip
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    options = GenerateOptions(tools=[WEATHER_TOOL], tool_choice="none")
    await collect(driver, GenerateRequest(rid="r1", messages=CHAT, options=options))
    assert fake_engine.sent("/v1/chat/completions")["stream"] is True


async def test_chat_stream_relays_tool_call_deltas(driver, fake_engine):
    """With --tool-call-parser: the first piece names the call, the rest carry arguments;
    a natural stop after calls finishes as `tool_calls` [11]. (The driver only streams a
    tools request when `tool_choice` is "none"; the shape is what a stream carries.)"""
    first = {"id": "call_0", "index": 0, "type": "function",
             "function": {"name": "get_weather", "arguments": ""}}  # fmt: skip
    args_1 = {"id": None, "index": 0, "type": "function",
              "function": {"name": None, "arguments": '{"city": '}}  # fmt: skip
    args_2 = {"id": None, "index": 0, "type": "function",
              "function": {"name": None, "arguments": '"Paris"}'}}  # fmt: skip
    running = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    body = fake_engine.sse(
        sglang_chat_chunk(content=""),  # the role chunk carries nothing
        sglang_chat_chunk(tool_calls=[first], usage=running),
        sglang_chat_chunk(tool_calls=[args_1], usage=running),
        sglang_chat_chunk(tool_calls=[args_2], usage=running),
        sglang_chat_chunk(finish="tool_calls"),
        usage_chunk(9, 6),
        b"[DONE]",
    )
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    options = GenerateOptions(tools=[WEATHER_TOOL], tool_choice="none")
    chunks = await collect(driver, GenerateRequest(rid="r1", messages=CHAT, options=options))
    assert [chunk.tool_calls for chunk in chunks[:3]] == [[first], [args_1], [args_2]]
    assert chunks[-1] == GenerateChunk("", "tool_calls", 9, 6)
    assert len(chunks) == 4


async def test_chat_stream_relays_logprobs_of_each_chunk(driver, fake_engine):
    """Chat logprobs come as OpenAI's `{"content": [...]}`, each chunk with its own tokens."""

    def entry(token: str, logprob: float) -> dict:
        top = [{"token": token, "bytes": list(token.encode()), "logprob": logprob},
               {"token": "z", "bytes": [122], "logprob": -3.0}]  # fmt: skip
        return {"token": token, "bytes": list(token.encode()), "logprob": logprob,
                "top_logprobs": top}  # fmt: skip

    body = fake_engine.sse(
        sglang_chat_chunk(content=""),
        sglang_chat_chunk(content="Hi", logprobs={"content": [entry("Hi", -0.1)]}),
        sglang_chat_chunk(content="!", logprobs={"content": [entry("!", -0.2)]}),
        sglang_chat_chunk(finish="stop"),
        usage_chunk(3, 2),
        b"[DONE]",
    )
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    options = GenerateOptions(logprobs=True, top_logprobs=2)
    chunks = await collect(driver, GenerateRequest(rid="r1", messages=CHAT, options=options))
    assert [chunk.logprobs for chunk in chunks] == [
        {"content": [entry("Hi", -0.1)]}, {"content": [entry("!", -0.2)]}, None,
    ]  # fmt: skip
    assert chunks[-1] == GenerateChunk("", "stop", 3, 2)


async def test_unstreamed_chat_returns_tool_calls_and_logprobs(driver, fake_engine):
    calls = [{"id": "call_0", "index": 0, "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]  # fmt: skip
    reply = {
        "id": "r1", "object": "chat.completion", "created": 1, "model": "base",
        "choices": [{"index": 0,
                     "message": {"role": "assistant", "content": None, "tool_calls": calls},
                     "logprobs": {"content": []}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15},
    }  # fmt: skip
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, json=reply))
    options = GenerateOptions(tools=[WEATHER_TOOL], tool_choice="required")
    request = GenerateRequest(rid="r1", messages=CHAT, stream=False, options=options)
    [chunk] = await collect(driver, request)
    assert chunk.tool_calls == calls
    assert (chunk.finish_reason, chunk.prompt_tokens, chunk.completion_tokens) == (
        "tool_calls", 9, 6,
    )  # fmt: skip


async def test_completion_maps_every_option_to_generate(driver, fake_engine):
    """Penalties and logit_bias keep their names in `sampling_params`; json_schema is the
    schema as a JSON string; logprobs are top-level switches; tools are not sent [11]."""
    body = fake_engine.sse(generate_event("a", "stop"), b"[DONE]")
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    options = GenerateOptions(
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        logit_bias={"42": -100.0},
        logprobs=True,
        top_logprobs=2,
        response_format=JSON_SCHEMA_FORMAT,
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        parallel_tool_calls=True,
    )
    request = GenerateRequest(
        rid="r1", adapter="ad-v1", prompt="Once", max_tokens=4, seed=7, options=options
    )
    await collect(driver, request)
    sent = fake_engine.sent("/generate")
    assert json.loads(sent["sampling_params"].pop("json_schema")) == SCHEMA
    assert sent == {
        "rid": "r1", "text": "Once", "stream": True, "lora_path": "ad-v1",
        "sampling_params": {
            "max_new_tokens": 4, "sampling_seed": 7,
            "presence_penalty": 0.5, "frequency_penalty": -0.5, "logit_bias": {"42": -100.0},
        },
        "return_logprob": True, "logprob_start_len": -1, "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        ({"type": "json_object"}, '{"type": "object"}'),  # what SGLang's own routes send
        ({"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA, "strict": False}},
         json.dumps(SCHEMA, separators=(",", ":"))),  # strict or not, it constrains
        ({"type": "text"}, None),
    ],
)  # fmt: skip
async def test_completion_response_format_becomes_json_schema(
    driver, fake_engine, response_format, expected
):
    body = fake_engine.sse(generate_event("{}", "stop"), b"[DONE]")
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    options = GenerateOptions(response_format=response_format)
    await collect(driver, GenerateRequest(rid="r1", prompt="x", options=options))
    sent = fake_engine.sent("/generate")
    assert sent["sampling_params"].get("json_schema") == expected
    assert "return_logprob" not in sent


async def test_completion_json_schema_without_a_schema_is_refused_unsent(driver, fake_engine):
    """SGLang's OpenAI routes answer 400 for it; the driver does the same for /generate."""
    options = GenerateOptions(response_format={"type": "json_schema", "json_schema": {"name": "r"}})
    with pytest.raises(EngineRejected, match="schema is required") as raised:
        await collect(driver, GenerateRequest(rid="r1", prompt="x", options=options))
    assert raised.value.engine_status == 400
    assert "/generate" not in fake_engine.paths()


async def test_completion_logprobs_become_openai_completions_logprobs(driver, fake_engine):
    """/generate repeats every token's [logprob, id, text] so far; each chunk gets only its
    new tokens, `top_logprobs` with the sampled token too, offsets into the text [11]."""
    once = (-0.5, 11, "Once")
    upon = (-0.25, 12, " upon")
    a = (-1.5, 13, " a")
    alt = {11: [(-0.5, 11, "Once"), (-2.0, 21, "One")],
           12: [(-0.25, 12, " upon"), (-3.0, 22, " more")],
           13: [(-1.0, 23, " the"), (-1.5, 13, " a")]}  # fmt: skip
    body = fake_engine.sse(
        logprob_generate_event("Once", [once], [alt[11]]),
        logprob_generate_event("Once upon", [once, upon], [alt[11], alt[12]]),
        logprob_generate_event("Once upon a", [once, upon, a], [alt[11], alt[12], alt[13]],
                               "length"),
        b"[DONE]",
    )  # fmt: skip
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    options = GenerateOptions(logprobs=True, top_logprobs=2)
    chunks = await collect(driver, GenerateRequest(rid="r1", prompt="x", options=options))
    assert [chunk.text for chunk in chunks] == ["Once", " upon", " a"]
    assert [chunk.logprobs for chunk in chunks] == [
        {"tokens": ["Once"], "token_logprobs": [-0.5],
         "top_logprobs": [{"Once": -0.5, "One": -2.0}], "text_offset": [0]},
        {"tokens": [" upon"], "token_logprobs": [-0.25],
         "top_logprobs": [{" upon": -0.25, " more": -3.0}], "text_offset": [4]},
        {"tokens": [" a"], "token_logprobs": [-1.5],
         "top_logprobs": [{" a": -1.5, " the": -1.0}], "text_offset": [9]},
    ]  # fmt: skip
    assert chunks[-1].finish_reason == "length"


async def test_completion_logprobs_of_tokens_without_new_text_still_arrive(driver, fake_engine):
    """A token whose text is held back (a stop-string prefix, half a character) has its
    logprob passed on at once; with `logprobs: 0` the sampled token alone is listed."""
    first, second = (-0.1, 5, "ab"), (-0.2, 6, "\ufffd")
    body = fake_engine.sse(
        logprob_generate_event("ab", [first]),
        logprob_generate_event("ab", [first, second]),
        logprob_generate_event("ab!", [first, second], finish="stop"),
        b"[DONE]",
    )
    fake_engine.on("POST", "/generate", httpx.Response(200, content=body))
    options = GenerateOptions(logprobs=True, top_logprobs=0)
    chunks = await collect(driver, GenerateRequest(rid="r1", prompt="x", options=options))
    assert fake_engine.sent("/generate")["top_logprobs_num"] == 0
    assert [(chunk.text, chunk.logprobs) for chunk in chunks] == [
        ("ab", {"tokens": ["ab"], "token_logprobs": [-0.1], "top_logprobs": [{"ab": -0.1}],
                "text_offset": [0]}),
        ("", {"tokens": ["\ufffd"], "token_logprobs": [-0.2],
              "top_logprobs": [{"\ufffd": -0.2}], "text_offset": [2]}),
        ("!", None),
    ]  # fmt: skip


async def test_unstreamed_completion_returns_all_logprobs(driver, fake_engine):
    event = logprob_generate_event("Hi!", [(-0.1, 5, "Hi"), (-0.2, 6, "!")], None, "stop")
    fake_engine.on("POST", "/generate", httpx.Response(200, json=event))
    options = GenerateOptions(logprobs=True)
    request = GenerateRequest(rid="r1", prompt="x", stream=False, options=options)
    assert await collect(driver, request) == [
        GenerateChunk("Hi!", "stop", 3, 2, logprobs={
            "tokens": ["Hi", "!"], "token_logprobs": [-0.1, -0.2],
            "top_logprobs": [{"Hi": -0.1}, {"!": -0.2}], "text_offset": [0, 2]}),
    ]  # fmt: skip


# --- n > 1: fanned out as single requests [9, 11] ---------------------------------------


def test_fan_out_gives_each_choice_its_rid_and_seed():
    options = GenerateOptions(n=3, presence_penalty=0.5)
    parts = fan_out(GenerateRequest(rid="r1", prompt="x", seed=2**63 - 2, options=options))
    assert [part.rid for part in parts] == ["r1-0", "r1-1", "r1-2"]
    assert [part.seed for part in parts] == [2**63 - 2, 2**63 - 1, -(2**63)]  # int64 wraps
    assert {part.options for part in parts} == {GenerateOptions(n=1, presence_penalty=0.5)}
    unseeded = fan_out(GenerateRequest(rid="r1", prompt="x", options=GenerateOptions(n=2)))
    assert [part.seed for part in unseeded] == [None, None]
    single = GenerateRequest(rid="r1", prompt="x")
    assert fan_out(single) == [single]


async def test_n_completions_fan_out_and_merge_with_indexes_and_summed_usage(driver, fake_engine):
    def stream(*texts: str) -> httpx.Response:
        events = [generate_event(text, None, i + 1) for i, text in enumerate(texts[:-1])]
        events.append(generate_event(texts[-1], "stop", len(texts)))
        return httpx.Response(200, content=fake_engine.sse(*events, b"[DONE]"))

    fake_engine.on("POST", "/generate", by_rid({
        "r1-0": stream("A", "AB"), "r1-1": stream("C"), "r1-2": stream("D", "DE", "DEF"),
    }))  # fmt: skip
    options = GenerateOptions(n=3, logit_bias={"5": 1.0})
    request = GenerateRequest(rid="r1", prompt="x", seed=7, max_tokens=8, options=options)
    chunks = await collect(driver, request)

    bodies = sent_bodies(fake_engine, "/generate")
    assert sorted(bodies) == ["r1-0", "r1-1", "r1-2"]
    for i in range(3):  # no `n`: each is one choice, its seed `seed + i`
        assert bodies[f"r1-{i}"] == {
            "rid": f"r1-{i}", "text": "x", "stream": True,
            "sampling_params": {"max_new_tokens": 8, "sampling_seed": 7 + i,
                                "logit_bias": {"5": 1.0}},
        }  # fmt: skip
    texts = {i: "".join(c.text for c in chunks if c.index == i) for i in range(3)}
    assert texts == {0: "AB", 1: "C", 2: "DEF"}
    finishes = [(chunk.index, chunk.finish_reason) for chunk in chunks if chunk.finish_reason]
    assert sorted(finishes) == [(0, "stop"), (1, "stop"), (2, "stop")]
    assert {chunk.prompt_tokens for chunk in chunks} == {3}  # the prompt, counted once
    totals = [chunk.completion_tokens for chunk in chunks]
    assert totals == sorted(totals) and totals[-1] == 2 + 1 + 3  # running sum of choices


async def test_n_chat_fans_out_and_puts_each_choices_usage_on_its_finish(driver, fake_engine):
    def stream(text: str, completion: int) -> httpx.Response:
        running = {"prompt_tokens": 5, "completion_tokens": completion,
                   "total_tokens": 5 + completion}  # fmt: skip
        return httpx.Response(200, content=fake_engine.sse(
            sglang_chat_chunk(content=""),
            sglang_chat_chunk(content=text, usage=running),
            sglang_chat_chunk(finish="stop"),
            usage_chunk(5, completion),
            b"[DONE]",
        ))  # fmt: skip

    fake_engine.on("POST", "/v1/chat/completions", by_rid({
        "r1-0": stream("yes", 1), "r1-1": stream("no", 2),
    }))  # fmt: skip
    request = GenerateRequest(
        rid="r1", adapter="ad-v1", messages=CHAT, seed=3, options=GenerateOptions(n=2)
    )
    chunks = await collect(driver, request)
    bodies = sent_bodies(fake_engine, "/v1/chat/completions")
    assert sorted(bodies) == ["r1-0", "r1-1"]
    for i in range(2):
        body = bodies[f"r1-{i}"]
        assert "n" not in body
        assert (body["seed"], body["model"], body["lora_path"]) == (3 + i, "base:ad-v1", "ad-v1")
    assert chunks[0] == GenerateChunk("yes", None, 5, 1, index=0)  # choice 0 goes first
    finishes = {chunk.index: chunk for chunk in chunks if chunk.finish_reason}
    assert finishes[0].finish_reason == finishes[1].finish_reason == "stop"
    assert chunks[-1].completion_tokens == 3 and chunks[-1].prompt_tokens == 5


async def test_n_waits_for_choice_0_to_stream_before_sending_the_others(driver, fake_engine):
    """The other choices then find the prompt in the prefix cache; an abort meanwhile
    stops choice 0 and ends the unsent ones as aborted without sending them."""
    held = fake_engine.held(b"")  # choice 0 accepted, still in its prefill
    fake_engine.on("POST", "/generate", httpx.Response(200, stream=held))
    fake_engine.on("POST", "/abort_request", httpx.Response(200))
    stream = driver.generate(GenerateRequest(rid="r1", prompt="x", options=GenerateOptions(n=3)))
    reader = asyncio.create_task(collect_from(stream))
    for _ in range(20):
        await asyncio.sleep(0)
    assert list(sent_bodies(fake_engine, "/generate")) == ["r1-0"]
    await driver.abort("r1")
    chunks = await asyncio.wait_for(reader, 5)
    assert list(sent_bodies(fake_engine, "/generate")) == ["r1-0"]
    assert sorted(c.index for c in chunks if c.finish_reason == ABORTED) == [0, 1, 2]
    aborted = sorted(json.loads(r.content)["rid"] for r in fake_engine.requests
                     if r.url.path == "/abort_request")  # fmt: skip
    assert aborted == ["r1-0", "r1-1", "r1-2"]  # each live rid exactly: SGLang needs that


async def collect_from(stream) -> list[GenerateChunk]:
    return [chunk async for chunk in stream]


async def test_abort_of_a_fan_out_aborts_every_choice_by_its_own_rid(driver, fake_engine):
    streams = {f"r1-{i}": fake_engine.held(fake_engine.sse(generate_event("x", None, 1)))
               for i in range(3)}  # fmt: skip
    fake_engine.on(
        "POST", "/generate",
        lambda request: httpx.Response(200, stream=streams[json.loads(request.content)["rid"]]),
    )  # fmt: skip
    fake_engine.on("POST", "/abort_request", httpx.Response(200))
    chunks: list[GenerateChunk] = []
    all_streaming = asyncio.Event()

    async def consume() -> None:
        async for chunk in driver.generate(
            GenerateRequest(rid="r1", prompt="x", options=GenerateOptions(n=3))
        ):
            chunks.append(chunk)
            if len({c.index for c in chunks}) == 3:
                all_streaming.set()

    reader = asyncio.create_task(consume())
    await asyncio.wait_for(all_streaming.wait(), 5)
    await driver.abort("r1")
    await asyncio.wait_for(reader, 5)
    aborted = sorted(json.loads(r.content)["rid"] for r in fake_engine.requests
                     if r.url.path == "/abort_request")  # fmt: skip
    assert aborted == ["r1-0", "r1-1", "r1-2"]
    assert sorted(c.index for c in chunks if c.finish_reason == ABORTED) == [0, 1, 2]
    assert chunks[-1].completion_tokens == 3


async def test_unstreamed_n_returns_one_chunk_per_choice_counts_on_the_first(driver, fake_engine):
    fake_engine.on("POST", "/generate", by_rid({
        "r1-0": httpx.Response(200, json=generate_event("left", "stop", 2)),
        "r1-1": httpx.Response(200, json=generate_event("right", "length", 4)),
    }))  # fmt: skip
    request = GenerateRequest(rid="r1", prompt="x", stream=False, options=GenerateOptions(n=2))
    assert await collect(driver, request) == [
        GenerateChunk("left", "stop", 3, 6, index=0),  # the prompt once, completions summed
        GenerateChunk("right", "length", index=1),
    ]
    bodies = sent_bodies(fake_engine, "/generate")
    assert [bodies[rid]["stream"] for rid in ("r1-0", "r1-1")] == [False, False]


async def test_n_with_one_choice_refused_raises_that_error(driver, fake_engine):
    error = {"error": {"message": "Got LoRA adapter that has never been loaded: ad-v9"}}
    fake_engine.on("POST", "/generate", by_rid({
        "r1-0": httpx.Response(200, content=fake_engine.sse(generate_event("a", "stop"))),
        "r1-1": httpx.Response(400, json=error),
    }))  # fmt: skip
    request = GenerateRequest(rid="r1", adapter="ad-v9", prompt="x", options=GenerateOptions(n=2))
    with pytest.raises(AdapterNotLoaded):
        await collect(driver, request)


async def test_the_finish_keeps_its_index_tool_calls_and_logprobs_when_usage_joins_it():
    async def chunks():
        yield GenerateChunk("", "stop", index=2, logprobs={"content": []})
        yield GenerateChunk("", None, 4, 7)

    merged = [chunk async for chunk in with_usage_on_finish(chunks())]
    assert merged == [GenerateChunk("", "stop", 4, 7, index=2, logprobs={"content": []})]
