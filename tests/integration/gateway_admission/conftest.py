"""Fixtures for admission tests: Redis db 13, a key prefix per test, a hand-moved clock."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from loraplex.gateway.admission import Admission

REDIS_URL = os.environ.get("LORAPLEX_TEST_ADMISSION_REDIS", "redis://127.0.0.1:6379/13")
START = 1_780_000_000.0  # a fixed Unix time, so tests do not depend on the time of day


class FakeClock:
    """Unix time that only moves when a test moves it."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


@pytest.fixture
def prefix() -> str:
    """Key prefix unique to this test."""
    return f"test:admission:{uuid.uuid4().hex[:10]}:"


@pytest.fixture
async def redis_client(prefix: str) -> AsyncIterator[Redis]:
    """A client on the test database; deletes the test's keys afterwards."""
    client = Redis.from_url(REDIS_URL)
    yield client
    keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
def clock() -> FakeClock:
    """The test's clock."""
    return FakeClock()


@pytest.fixture
async def admission(redis_client: Redis, prefix: str, clock: FakeClock) -> AsyncIterator[Admission]:
    """Admission on the test's keys and clock, with default lease and fail mode."""
    gate = Admission(REDIS_URL, key_prefix=prefix, clock=clock)
    yield gate
    await gate.aclose()
