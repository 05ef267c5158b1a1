"""The worker processes that check tenant files: results and refusals come back, and a check
that runs too long or takes too much memory is abandoned without harming the next one."""

from __future__ import annotations

import time

import pytest

from loraplex.adapters.errors import AdapterRejected, Rejection
from loraplex.cpu_pool import CheckAbandoned, CpuPool

MEMORY = 512 * 2**20


def refuse() -> None:
    raise AdapterRejected(Rejection.BAD_CONFIG, "no")


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def allocate(megabytes: int) -> int:
    return len(bytearray(megabytes * 2**20))


async def test_a_refusal_in_a_worker_reaches_the_caller_with_its_code():
    pool = CpuPool(1, MEMORY, timeout_s=30)
    try:
        with pytest.raises(AdapterRejected) as caught:
            await pool.run(refuse)
        assert caught.value.code == Rejection.BAD_CONFIG
    finally:
        pool.close()


async def test_a_check_past_its_time_is_abandoned_and_the_pool_serves_again():
    # The time includes a fresh worker's start (a spawn and its imports): ~1 s on a busy host.
    pool = CpuPool(1, MEMORY, timeout_s=8.0)
    try:
        with pytest.raises(CheckAbandoned):
            await pool.run(sleep, 30)
        assert await pool.run(sleep, 0) == "slept"
    finally:
        pool.close()


async def test_a_check_over_its_memory_is_abandoned_and_the_pool_serves_again():
    pool = CpuPool(1, MEMORY, timeout_s=30)
    try:
        with pytest.raises(CheckAbandoned):
            await pool.run(allocate, 2048)
        assert await pool.run(allocate, 1) == 2**20
    finally:
        pool.close()
