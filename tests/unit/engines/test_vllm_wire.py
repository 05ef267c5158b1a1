"""The vLLM driver's requests and its reading of vLLM's answers, on an in-memory engine."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from loraplex.serving.engines import (
    AdapterNotLoaded,
    EngineDied,
    EngineRejected,
    EngineUnavailable,
    GenerateChunk,
    GenerateRequest,
    VllmDriver,
)

MODELS = {
    "object": "list",
    "data": [
        {"id": "base", "object": "model", "root": "/models/base", "parent": None},
        {"id": "ad-v1", "object": "model", "root": "/cache/ad-v1", "parent": "base"},
    ],
}


def completion_chunk(text: str, finish: str | None, completion_tokens: int) -> dict:
    """A vLLM completions chunk with continuous usage stats."""
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        "usage": {"prompt_tokens": 2, "completion_tokens": completion_tokens},
    }


@pytest.fixture
def driver(fake_engine) -> VllmDriver:
    """A driver whose HTTP client talks to the fake engine."""
    fake_engine.on("GET", "/v1/models", httpx.Response(200, json=MODELS))
    return VllmDriver("http://engine.test", client=fake_engine.client())


async def collect(driver: VllmDriver, request: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in driver.generate(request)]


async def test_load_sends_name_and_path(driver, fake_engine):
    fake_engine.on(
        "POST",
        "/v1/load_lora_adapter",
        httpx.Response(200, text="Success: LoRA adapter 'ad-v1' added successfully."),
    )
    await driver.load("ad-v1", Path("/cache/ad-v1"))
    assert fake_engine.sent("/v1/load_lora_adapter") == {
        "lora_name": "ad-v1", "lora_path": "/cache/ad-v1",
    }  # fmt: skip


async def test_loading_an_already_loaded_name_succeeds(driver, fake_engine):
    error = {"error": {"message": "The lora adapter 'ad-v1' has already been loaded."}}
    fake_engine.on("POST", "/v1/load_lora_adapter", httpx.Response(400, json=error))
    await driver.load("ad-v1", Path("/cache/ad-v1"))


async def test_load_refused_by_the_engine_carries_its_message(driver, fake_engine):
    error = {"error": {"message": "LoRA rank 128 is greater than max_lora_rank 64."}}
    fake_engine.on("POST", "/v1/load_lora_adapter", httpx.Response(500, json=error))
    with pytest.raises(EngineRejected, match="greater than max_lora_rank"):
        await driver.load("big", Path("/cache/big"))


async def test_unload_of_an_unknown_name_is_a_no_op(driver, fake_engine):
    error = {"error": {"message": "The lora adapter 'ghost' cannot be found."}}
    fake_engine.on("POST", "/v1/unload_lora_adapter", httpx.Response(404, json=error))
    await driver.unload("ghost")


async def test_adapter_is_the_model_and_usage_is_continuous(driver, fake_engine):
    body = fake_engine.sse(completion_chunk("a", "stop", 1), b"[DONE]")
    fake_engine.on("POST", "/v1/completions", httpx.Response(200, content=body))
    request = GenerateRequest(rid="r1", adapter="ad-v1", prompt="x", max_tokens=3, seed=7)
    await collect(driver, request)
    assert fake_engine.sent("/v1/completions") == {
        "model": "ad-v1", "prompt": "x", "max_tokens": 3, "seed": 7, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }  # fmt: skip


async def test_base_requests_name_the_served_base_model(driver, fake_engine):
    body = fake_engine.sse(completion_chunk("a", "stop", 1), b"[DONE]")
    fake_engine.on("POST", "/v1/chat/completions", httpx.Response(200, content=body))
    await collect(driver, GenerateRequest(rid="r1", messages=[{"role": "user", "content": "x"}]))
    assert fake_engine.sent("/v1/chat/completions")["model"] == "base"


async def test_stream_chunks_carry_running_token_counts(driver, fake_engine):
    body = fake_engine.sse(
        completion_chunk("a", None, 1), completion_chunk("b", "length", 2), b"[DONE]"
    )
    fake_engine.on("POST", "/v1/completions", httpx.Response(200, content=body))
    chunks = await collect(driver, GenerateRequest(rid="r1", prompt="x"))
    assert chunks == [GenerateChunk("a", None, 2, 1), GenerateChunk("b", "length", 2, 2)]


async def test_unknown_adapter_is_adapter_not_loaded(driver, fake_engine):
    error = {"error": {"message": "The model `ghost` does not exist.", "code": 404}}
    fake_engine.on("POST", "/v1/completions", httpx.Response(404, json=error))
    with pytest.raises(AdapterNotLoaded, match="does not exist"):
        await collect(driver, GenerateRequest(rid="r1", adapter="ghost", prompt="x"))


async def test_unstreamed_generation_is_one_chunk(driver, fake_engine):
    response = completion_chunk("whole answer", "stop", 2)
    fake_engine.on("POST", "/v1/completions", httpx.Response(200, json=response))
    chunks = await collect(driver, GenerateRequest(rid="r1", prompt="x", stream=False))
    assert chunks == [GenerateChunk("whole answer", "stop", 2, 2)]
    assert "stream_options" not in fake_engine.sent("/v1/completions")


async def test_stream_ending_without_a_finish_is_an_engine_death(driver, fake_engine):
    body = fake_engine.sse(completion_chunk("a", None, 1))
    fake_engine.on("POST", "/v1/completions", httpx.Response(200, content=body))
    with pytest.raises(EngineDied):
        await collect(driver, GenerateRequest(rid="r1", prompt="x"))


async def test_an_unreachable_engine_is_unavailable_and_unhealthy():
    driver = VllmDriver("http://127.0.0.1:9")  # the discard port: nothing listens
    with pytest.raises(EngineUnavailable):
        await collect(driver, GenerateRequest(rid="r1", prompt="x", adapter="a"))
    assert not (await driver.health()).healthy
    await driver.aclose()
