"""The engine drivers against real SGLang and vLLM engines serving the generated model.

Every test runs once per kind (the `engine` fixture); kind-specific behaviour says so.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from loraplex.serving.engines import (
    ABORTED,
    AdapterNotLoaded,
    EngineDriver,
    EngineRejected,
    GenerateChunk,
    GenerateRequest,
)

pytestmark = pytest.mark.engine

CHAT = [{"role": "user", "content": "What colour is the sky?"}]


def rid() -> str:
    """A request id that is never a prefix of another."""
    return uuid.uuid4().hex


async def collect(driver: EngineDriver, request: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in driver.generate(request)]


async def test_engine_reports_healthy(driver):
    assert (await driver.health()).healthy


async def test_loaded_adapter_is_listed_until_unloaded(driver, adapter_dirs, adapter_name):
    await driver.load(adapter_name, adapter_dirs[8])
    assert adapter_name in await driver.list_loaded()
    await driver.unload(adapter_name)
    assert adapter_name not in await driver.list_loaded()


async def test_loading_twice_and_unloading_twice_are_harmless(driver, adapter_dirs, adapter_name):
    await driver.load(adapter_name, adapter_dirs[16])
    await driver.load(adapter_name, adapter_dirs[16])
    await driver.unload(adapter_name)
    await driver.unload(adapter_name)
    assert adapter_name not in await driver.list_loaded()


async def test_adapter_over_the_engine_max_rank_is_rejected(driver, adapter_dirs, adapter_name):
    with pytest.raises(EngineRejected):
        await driver.load(adapter_name, adapter_dirs[128])


async def test_streamed_deltas_join_to_the_unstreamed_answer(driver, adapter_dirs, adapter_name):
    await driver.load(adapter_name, adapter_dirs[8])
    base = dict(adapter=adapter_name, prompt="The old map", max_tokens=24, temperature=0.0)
    streamed = await collect(driver, GenerateRequest(rid=rid(), **base))
    whole = await collect(driver, GenerateRequest(rid=rid(), stream=False, **base))
    assert "".join(chunk.text for chunk in streamed) == whole[0].text
    await driver.unload(adapter_name)


async def test_stream_ends_with_a_finish_reason_and_token_counts(
    driver, adapter_dirs, adapter_name
):
    await driver.load(adapter_name, adapter_dirs[8])
    request = GenerateRequest(
        rid=rid(), adapter=adapter_name, messages=CHAT, max_tokens=12, temperature=0.0
    )
    chunks = await collect(driver, request)
    assert {chunk.finish_reason for chunk in chunks} & {"stop", "length"}
    assert 0 < chunks[-1].completion_tokens <= 12
    assert chunks[-1].prompt_tokens > 0
    await driver.unload(adapter_name)


async def test_base_model_answers_without_an_adapter(driver):
    chunks = await collect(
        driver,
        GenerateRequest(rid=rid(), prompt="The", max_tokens=4, temperature=0.0, stream=False),
    )
    assert chunks[0].completion_tokens == 4 or chunks[0].finish_reason == "stop"


async def test_unknown_adapter_is_adapter_not_loaded(driver):
    with pytest.raises(AdapterNotLoaded):
        await collect(driver, GenerateRequest(rid=rid(), adapter="never-loaded", prompt="x"))


async def test_abort_ends_a_long_generation_and_frees_the_engine(
    driver, adapter_dirs, adapter_name
):
    await driver.load(adapter_name, adapter_dirs[8])
    request = GenerateRequest(
        rid=rid(), adapter=adapter_name, prompt="The", max_tokens=1000, temperature=0.0
    )
    chunks: list[GenerateChunk] = []

    streaming = asyncio.Event()

    async def consume() -> None:
        try:
            async for chunk in driver.generate(request):
                chunks.append(chunk)
                if len(chunks) >= 3:
                    streaming.set()
        finally:
            streaming.set()

    reader = asyncio.create_task(consume())
    await streaming.wait()
    await driver.abort(request.rid)
    await reader
    assert chunks[-1].finish_reason == ABORTED
    assert await _engine_becomes_idle(driver)
    await driver.unload(adapter_name)


async def test_metrics_expose_the_engine_request_gauges(driver):
    samples = await driver.metrics()
    assert driver.gauges.running in samples and driver.gauges.waiting in samples
    load = await driver.queue_depth()
    assert load.running >= 0 and load.waiting >= 0


async def test_an_unloaded_adapter_is_reloaded_by_sglang_itself_when_named(
    driver, engine, adapter_dirs, adapter_name
):
    """SGLang 0.5.23 remembers every path it loaded: unload means "evict until next use".

    So the engine's loaded set can grow behind the gateway's back, which is why placement
    reconciles to what the engine reports. vLLM refuses the name instead.
    """
    await driver.load(adapter_name, adapter_dirs[8])
    await driver.unload(adapter_name)
    request = GenerateRequest(
        rid=rid(), adapter=adapter_name, prompt="The", max_tokens=2, stream=False
    )
    if engine.kind == "vllm":
        with pytest.raises(AdapterNotLoaded):
            await collect(driver, request)
        return
    chunks = await collect(driver, request)
    assert chunks[0].completion_tokens
    assert adapter_name in await driver.list_loaded()
    await driver.unload(adapter_name)


async def _engine_becomes_idle(driver: EngineDriver, polls: int = 100) -> bool:
    """Whether the engine reports no running request within `polls` metric reads."""
    for _ in range(polls):
        if (await driver.queue_depth()).running == 0:
            return True
        await asyncio.sleep(0.05)
    return False
