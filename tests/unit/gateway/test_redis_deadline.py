"""Admission's Redis timeout counts Redis's slowness, not the event loop's own lateness."""

from __future__ import annotations

import asyncio
import time

import pytest

from loraplex.gateway.admission.service import redis_deadline


async def _answer_after(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "answer"


async def _busy_process(after_s: float, for_s: float) -> None:
    await asyncio.sleep(after_s)
    time.sleep(for_s)  # the loop runs nothing else meanwhile, as on a saturated host


def test_an_answer_that_came_while_the_loop_was_busy_is_not_a_timeout() -> None:
    async def scenario() -> str:
        busy = asyncio.create_task(_busy_process(0.01, 0.6))
        async with redis_deadline(0.3):
            answer = await _answer_after(0.05)  # Redis answered at 0.05 s; read at 0.61 s
        await busy
        return answer

    assert asyncio.run(scenario()) == "answer"


def test_a_redis_that_does_not_answer_still_times_out() -> None:
    async def scenario() -> None:
        async with redis_deadline(0.1):
            await asyncio.Event().wait()

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(scenario())
    assert time.monotonic() - started < 1.0


def test_a_busy_loop_buys_a_silent_redis_a_few_windows_not_forever() -> None:
    async def scenario() -> None:
        async def keep_busy() -> None:
            while True:
                await asyncio.sleep(0.01)
                time.sleep(0.12)  # every deadline check runs late

        busy = asyncio.create_task(keep_busy())
        try:
            async with redis_deadline(0.1):
                await asyncio.Event().wait()
        finally:
            busy.cancel()

    with pytest.raises(TimeoutError):
        asyncio.run(scenario())
