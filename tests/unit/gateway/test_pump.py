"""The engine side of a request: retries before the first token, distinct timeouts, aborts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest
from prometheus_client import Histogram

from loraplex.gateway import observe
from loraplex.gateway.buffer import StreamBuffer
from loraplex.gateway.pump import EngineRun, StreamLimits, pump
from loraplex.gateway.relay import encode_events
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.gateway.sse import ChunkEncoder
from loraplex.observability import metrics
from loraplex.serving.engines import (
    EngineDied,
    EngineHealth,
    EngineUnavailable,
    GenerateChunk,
    GenerateRequest,
)
from loraplex.serving.registry import EngineHandle, EngineRegistry
from tests.support.driver_stubs import IdleEngineCalls

TARGET = Target(model="tiny", base_model="tiny", max_context=4096, base_source="/nowhere")


class ScriptedDriver(IdleEngineCalls):
    """An engine whose stream follows a script: text pieces with delays, or a failure."""

    kind = "vllm"

    def __init__(
        self,
        url: str,
        pieces: list[str],
        *,
        delay_s: float = 0.0,
        first_delay_s: float = 0.0,
        fail_before_first: bool = False,
        die_after: int | None = None,
    ) -> None:
        self.url, self.pieces, self.delay_s, self.first_delay_s = (
            url,
            pieces,
            delay_s,
            first_delay_s,
        )
        self.fail_before_first, self.die_after = fail_before_first, die_after
        self.aborted: list[str] = []
        self.started: list[str] = []
        self.read_to_end: list[str] = []  # rids whose reply was read past the finish

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        self.started.append(request.rid)
        await asyncio.sleep(self.first_delay_s)
        if self.fail_before_first:
            raise EngineUnavailable("connection refused")
        for i, piece in enumerate(self.pieces):
            if self.die_after is not None and i == self.die_after:
                raise EngineDied("connection reset")
            if i:
                await asyncio.sleep(self.delay_s)
            last = i == len(self.pieces) - 1
            yield GenerateChunk(
                text=piece,
                finish_reason="stop" if last else None,
                prompt_tokens=3,
                completion_tokens=i + 1,
            )
        yield GenerateChunk("", None, 3, len(self.pieces))  # the usage chunk after the finish
        self.read_to_end.append(request.rid)  # an HTTP engine's connection is reusable now

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)


def _router(*drivers: ScriptedDriver) -> EngineRouter:
    registry = EngineRegistry()
    for i, driver in enumerate(drivers):
        registry.add(
            EngineHandle(
                id=f"e{i}",
                name=f"engine-{i}",
                url=driver.url,
                kind="vllm",
                base_model="tiny",
                max_lora_rank=64,
                gpu_slots=4,
                host_slots=8,
                driver=driver,
                healthy=True,
                in_flight=i,
            )
        )  # e0 is preferred: fewer in flight
    return EngineRouter(registry, cache=None)  # type: ignore[arg-type]  # base model: no adapter cache


def _job(**limits: float) -> EngineRun:
    request = GenerateRequest(rid="", prompt="hi", max_tokens=8)
    return EngineRun("cmpl-test", TARGET, request, StreamLimits(**limits), time.monotonic())  # type: ignore[arg-type]


async def _run(router: EngineRouter, job: EngineRun, max_bytes: int = 1 << 20) -> StreamBuffer:
    buffer = StreamBuffer(max_bytes=max_bytes)
    await pump(job, buffer, router)
    return buffer


async def test_a_stream_is_relayed_to_its_finish() -> None:
    buffer = await _run(_router(ScriptedDriver("a", ["Hel", "lo", "!"])), _job())
    taken = buffer.take()
    assert (taken.text, taken.finish_reason, buffer.completion_tokens) == ("Hello!", "stop", 3)


async def test_the_first_token_is_reported_while_the_stream_still_runs() -> None:
    job, heard = _job(), []
    job.on_first_token = lambda engine_id, ttft_s: heard.append((engine_id, ttft_s, job))
    slow = ScriptedDriver("a", ["Hel", "lo", "!"], delay_s=0.05)
    buffer = StreamBuffer(max_bytes=1 << 20)
    task = asyncio.create_task(pump(job, buffer, _router(slow)))
    while not heard:
        await asyncio.sleep(0.005)
    assert not task.done()  # heard before the stream ended: the cap learns from it now
    await task
    assert len(heard) == 1 and heard[0][0] == "e0"
    assert buffer.first_token_at is not None
    assert heard[0][1] == pytest.approx(buffer.first_token_at - job.started_at)


async def test_an_engine_failing_before_the_first_token_is_replaced_by_another() -> None:
    broken, healthy = ScriptedDriver("a", [], fail_before_first=True), ScriptedDriver("b", ["ok"])
    router = _router(broken, healthy)
    job = _job()
    buffer = await _run(router, job)
    assert buffer.take().text == "ok" and job.attempts == 2 and job.engine_name == "engine-1"
    assert router.registry.get("e0").healthy is False  # taken out of rotation


async def test_an_engine_dying_after_the_first_token_ends_with_an_error_not_a_hang() -> None:
    driver = ScriptedDriver("a", ["one", "two", "three"], die_after=1)
    buffer = await _run(_router(driver), _job())
    taken = buffer.take()
    assert taken.text == "one" and taken.error is not None and taken.error[0] == "engine_died"


@pytest.mark.parametrize(
    "script, limits, code",
    [
        ({"first_delay_s": 0.5}, {"ttft_timeout_s": 0.1}, "ttft_timeout"),
        ({"delay_s": 0.5}, {"idle_timeout_s": 0.1}, "idle_timeout"),
        ({"delay_s": 0.08}, {"total_timeout_s": 0.2, "idle_timeout_s": 1.0}, "total_timeout"),
    ],
)
async def test_each_timeout_ends_the_stream_with_its_own_code_and_aborts(
    script: dict, limits: dict, code: str
) -> None:
    driver = ScriptedDriver("a", ["x"] * 10, **script)
    buffer = await _run(_router(driver), _job(**limits))
    assert buffer.take().error[0] == code  # type: ignore[index]
    await _eventually(lambda: driver.aborted == driver.started[-1:])


async def test_an_engine_silent_past_the_ttft_timeout_is_replaced_by_another() -> None:
    silent = ScriptedDriver("a", ["never"], first_delay_s=30)  # a host cut off the network
    healthy = ScriptedDriver("b", ["ok"])
    job = _job(ttft_timeout_s=0.2)
    buffer = await _run(_router(silent, healthy), job)
    taken = buffer.take()
    assert (taken.text, taken.error, job.engine_name) == ("ok", None, "engine-1")
    await _eventually(lambda: silent.aborted == silent.started)  # not left running there


async def test_a_silent_engine_that_misses_a_health_probe_leaves_the_rotation() -> None:
    silent, healthy = ScriptedDriver("a", ["never"], first_delay_s=30), ScriptedDriver("b", ["ok"])

    async def no_answer() -> EngineHealth:
        await asyncio.sleep(30)  # cut off: the probe times out too
        return EngineHealth(True, 0.0)

    silent.health = no_answer  # type: ignore[method-assign]
    router = _router(silent, healthy)
    buffer = await _run(router, _job(ttft_timeout_s=0.2))
    assert buffer.take().text == "ok"
    assert router.registry.get("e0").healthy is False  # placement now looks elsewhere
    assert router.registry.get("e1").healthy is True


async def _eventually(check: Callable[[], bool], within_s: float = 2.0) -> None:
    """Wait for `check()`: aborts of a silent engine run beside the retry."""
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "never happened"
        await asyncio.sleep(0.01)


async def test_a_client_too_slow_for_the_buffer_gets_slow_client_and_the_engine_is_aborted() -> (
    None
):
    driver = ScriptedDriver("a", ["x" * 100] * 20)
    buffer = await _run(_router(driver), _job(), max_bytes=250)  # nobody takes from the buffer
    taken = buffer.take()
    assert taken.error[0] == "slow_client" and taken.pieces == 3  # type: ignore[index]
    assert driver.aborted == driver.started


async def test_cancelling_the_pump_aborts_the_engine_request() -> None:
    driver = ScriptedDriver("a", ["x"] * 100, delay_s=0.05)
    buffer = StreamBuffer(max_bytes=1 << 20)
    task = asyncio.create_task(pump(_job(), buffer, _router(driver)))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert driver.aborted == driver.started


async def test_no_healthy_engine_is_an_error_event() -> None:
    router = _router(ScriptedDriver("a", ["x"]))
    router.registry.get("e0").healthy = False
    buffer = await _run(router, _job())
    assert buffer.take().error[0] == "engine_unavailable"  # type: ignore[index]


async def test_the_gateways_own_ttft_share_is_measured_per_phase() -> None:
    """Operators see what the gateway adds to TTFT, apart from what the engine takes."""
    overhead = metrics.GATEWAY_OVERHEAD_SECONDS
    counts_before = {p: _count(overhead, p) for p in ("admission", "routing", "relay", "total")}
    job = _job()
    job.received_at = job.started_at - 0.004  # the handler got it 4 ms before the pump started
    buffer = await _run(_router(ScriptedDriver("a", ["Hel", "lo"])), job)
    batches = encode_events(
        ChunkEncoder(job.completion_id, "tiny", "completion"), buffer, False, None
    )
    assert [batch async for batch in batches]  # the client side sends the first text event
    observe.record(job, buffer, "t-1", time.monotonic())
    for phase, before in counts_before.items():
        assert _count(overhead, phase) == before + 1, phase
    assert job.received_at < job.started_at <= job.engine_sent_at <= buffer.first_token_at
    assert buffer.first_token_at <= buffer.first_relayed_at


def _count(histogram: Histogram, phase: str) -> float:
    counts = (
        s.value
        for family in histogram.collect()
        for s in family.samples
        if s.name.endswith("_count") and s.labels["phase"] == phase
    )
    return next(counts, 0.0)  # a phase never observed has no series yet


async def test_a_finished_reply_is_read_to_its_end_so_the_connection_is_reused() -> None:
    driver = ScriptedDriver("a", ["Hel", "lo"])
    buffer = await _run(_router(driver), _job())
    assert buffer.finish_reason == "stop"
    assert driver.read_to_end == driver.started  # not closed unread after the finish chunk
