"""A stream's engine reads under one moving timer (gateway/read_deadline.py): a steady stream
never times out however long it runs, a silent read does after the idle timeout, the whole
request's deadline wins when it comes first, and a cancellation from elsewhere (the client
left) stays a cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from loraplex.gateway.read_deadline import PhaseTimeout, ReadDeadline

IDLE_S = 0.1


async def _chunk(delay_s: float) -> str:
    await asyncio.sleep(delay_s)
    return "x"


async def _read(reads: ReadDeadline, delay_s: float) -> str:
    """One engine read under `reads`, as the relay makes it."""
    with reads:
        return await _chunk(delay_s)


async def test_a_steady_stream_longer_than_the_idle_timeout_is_never_timed_out() -> None:
    reads = ReadDeadline(IDLE_S, time.monotonic() + 60, time.monotonic)
    started = time.monotonic()
    got = [await _read(reads, IDLE_S / 4) for _ in range(16)]  # 4 idle timeouts long
    reads.close()
    assert got == ["x"] * 16 and time.monotonic() - started > 3 * IDLE_S


async def test_a_read_silent_past_the_idle_timeout_ends_with_idle_timeout() -> None:
    reads = ReadDeadline(IDLE_S, time.monotonic() + 60, time.monotonic)
    await _read(reads, IDLE_S / 2)
    began = time.monotonic()
    with pytest.raises(PhaseTimeout) as raised:
        await _read(reads, 30)
    assert raised.value.code == "idle_timeout"
    assert time.monotonic() - began >= IDLE_S * 0.9  # from the silent read's start, not before


async def test_the_whole_requests_deadline_ends_it_with_total_timeout() -> None:
    reads = ReadDeadline(10.0, time.monotonic() + IDLE_S, time.monotonic)
    with pytest.raises(PhaseTimeout) as raised:
        while True:
            await _read(reads, IDLE_S / 4)
    assert raised.value.code == "total_timeout"
    with pytest.raises(PhaseTimeout):  # past the deadline: refused before it awaits
        await _read(reads, 0)


async def test_a_cancellation_from_elsewhere_is_not_turned_into_a_timeout() -> None:
    async def relay() -> None:
        reads = ReadDeadline(IDLE_S, time.monotonic() + 60, time.monotonic)
        await _read(reads, 30)

    task = asyncio.create_task(relay())
    await asyncio.sleep(IDLE_S / 4)
    task.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_closed_deadline_leaves_no_timer_to_fire() -> None:
    reads = ReadDeadline(IDLE_S, time.monotonic() + 60, time.monotonic)
    await _read(reads, 0)
    reads.close()
    await asyncio.sleep(IDLE_S * 1.5)  # a timer left behind would cancel this task
