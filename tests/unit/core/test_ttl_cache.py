"""The request-path cache: concurrent misses share one load; failures are not kept."""

from __future__ import annotations

import asyncio

import pytest

from loraplex.ttl_cache import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_misses_share_one_load_and_expiry_loads_again() -> None:
    clock, loads = Clock(), 0
    cache: TtlCache[str, int] = TtlCache(5.0, clock)

    async def load() -> int:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        return loads

    async def scenario() -> list[int]:
        first = await asyncio.gather(*(cache.get("k", load) for _ in range(64)))
        clock.now = 4.9
        cached = await cache.get("k", load)
        clock.now = 5.1
        return [*first, cached, await cache.get("k", load)]

    values = asyncio.run(scenario())
    assert values[:65] == [1] * 65  # 64 concurrent callers, one query
    assert values[65] == 2 and loads == 2


def test_a_failed_load_reaches_every_waiter_and_is_not_cached() -> None:
    cache: TtlCache[str, int] = TtlCache(5.0, Clock())
    attempts = 0

    async def flaky() -> int:
        nonlocal attempts
        attempts += 1
        await asyncio.sleep(0)
        if attempts == 1:
            raise LookupError("not there")
        return 7

    async def scenario() -> tuple[list[object], int]:
        failed = await asyncio.gather(
            *(cache.get("k", flaky) for _ in range(3)), return_exceptions=True
        )
        return failed, await cache.get("k", flaky)

    failed, later = asyncio.run(scenario())
    assert all(isinstance(e, LookupError) for e in failed)
    assert later == 7 and attempts == 2


def test_one_caller_giving_up_does_not_cancel_the_shared_load() -> None:
    cache: TtlCache[str, str] = TtlCache(5.0, Clock())

    async def slow() -> str:
        await asyncio.sleep(0.05)
        return "v"

    async def scenario() -> str:
        impatient = asyncio.create_task(cache.get("k", slow))
        patient = asyncio.create_task(cache.get("k", slow))
        await asyncio.sleep(0.01)
        impatient.cancel()
        with pytest.raises(asyncio.CancelledError):
            await impatient
        return await patient

    assert asyncio.run(scenario()) == "v"


def test_forget_where_drops_matching_entries_only() -> None:
    cache: TtlCache[str, str] = TtlCache(5.0, Clock())

    async def scenario() -> list[str]:
        for key in ("a1", "a2", "b1"):
            await cache.get(key, lambda k=key: _value(k))
        cache.forget_where(lambda key, _: key.startswith("a"))
        return [await cache.get(k, lambda k=k: _value(k + "-new")) for k in ("a1", "b1")]

    assert asyncio.run(scenario()) == ["a1-new", "b1"]


async def _value(v: str) -> str:
    return v


def test_a_stale_entry_is_answered_at_once_while_one_refresh_runs() -> None:
    clock, loads = Clock(), 0
    cache: TtlCache[str, int] = TtlCache(5.0, clock, stale_s=10.0)
    refresh_may_finish = asyncio.Event()

    async def load() -> int:
        nonlocal loads
        loads += 1
        if loads > 1:
            await refresh_may_finish.wait()  # a slow database: nobody may wait for it
        return loads

    async def scenario() -> list[int]:
        seen = [await cache.get("k", load)]
        clock.now = 6.0  # expired, within the grace
        seen += await asyncio.gather(*(cache.get("k", load) for _ in range(8)))
        refresh_may_finish.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append(await cache.get("k", load))  # the refreshed value
        clock.now = 30.0  # past the grace: callers wait for a load again
        seen.append(await cache.get("k", load))
        return seen

    assert asyncio.run(scenario()) == [1, *[1] * 8, 2, 3]
    assert loads == 3  # one refresh for the eight stale hits
