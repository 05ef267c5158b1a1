"""The SGLang driver against the shapes in docs/engines.md (section in brackets).

Each test scripts the documented response, then checks the exact JSON the driver sent and
what it made of the answer.
"""

from __future__ import annotations

import asyncio
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
    GenerateRequest,
    SglangDriver,
)
from loraplex.serving.engines.sglang import sglang_model

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
