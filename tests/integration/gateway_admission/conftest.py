"""Fixtures for admission tests: a backend, a key prefix per test, a hand-moved clock.

Every test that runs in this one process runs twice: against the real Redis (db 13) and
against the embedded mode's in-process stand-in (`loraplex.redis_client`, fakeredis with
Lua), with the same assertions, so the embedded mode enforces exactly what Redis does.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from loraplex.gateway.admission import TenantQuotas
from loraplex.redis_client import embedded_redis

REDIS_URL = os.environ.get("LORAPLEX_TEST_ADMISSION_REDIS", "redis://127.0.0.1:6379/13")
START = 1_780_000_000.0  # a fixed Unix time, so tests do not depend on the time of day

# For tests that start other OS processes: the embedded stand-in lives in one process's memory.
REAL_REDIS_ONLY = pytest.mark.parametrize("backend", ["redis"], indirect=True)


class FakeClock:
    """Unix time that only moves when a test moves it."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


class Backend:
    """Where a test's admission keys live: "redis" (the real test database, reached by URL
    as an API process reaches it) or "embedded" (a fresh in-process server for this test)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.server = fakeredis.FakeServer() if name == "embedded" else None
        self._clients: list[Redis] = []

    def client(self) -> Redis:
        """A new client on this backend (closed after the test)."""
        client = Redis.from_url(REDIS_URL) if self.server is None else embedded_redis(self.server)
        self._clients.append(client)
        return client

    def admission(self, **options: Any) -> TenantQuotas:
        """`TenantQuotas` on its own client from the URL for Redis, on a client
        of the in-process server for the embedded mode."""
        return TenantQuotas(REDIS_URL if self.server is None else self.client(), **options)

    async def aclose(self) -> None:
        """Close the clients this backend made."""
        for client in self._clients:
            await client.aclose()


@pytest.fixture(params=["redis", "embedded"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The real Redis, then the embedded stand-in: each test runs on both."""
    chosen = Backend(request.param)
    yield chosen
    await chosen.aclose()


@pytest.fixture
def prefix() -> str:
    """Key prefix unique to this test."""
    return f"test:admission:{uuid.uuid4().hex[:10]}:"


@pytest.fixture
async def redis_client(backend: Backend, prefix: str) -> AsyncIterator[Redis]:
    """A client on the test's backend; deletes the test's keys afterwards."""
    client = backend.client()
    yield client
    keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
    if keys:
        await client.delete(*keys)


@pytest.fixture
def clock() -> FakeClock:
    """The test's clock."""
    return FakeClock()


@pytest.fixture
async def admission(
    backend: Backend, redis_client: Redis, prefix: str, clock: FakeClock
) -> AsyncIterator[TenantQuotas]:
    """Admission on the test's backend, keys and clock, with default lease and fail mode."""
    gate = backend.admission(key_prefix=prefix, clock=clock)
    yield gate
    await gate.aclose()
