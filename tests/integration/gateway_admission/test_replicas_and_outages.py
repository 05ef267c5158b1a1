"""Limits shared by API replicas in separate processes, and what happens when Redis is down."""

from __future__ import annotations

import multiprocessing
import socket
import time
from collections.abc import Iterator

import pytest

from loraplex.gateway.admission import LimiterUnavailable, TenantQuotas
from tests.integration.gateway_admission import workers
from tests.integration.gateway_admission.conftest import REAL_REDIS_ONLY, REDIS_URL

CLOSED_PORT_URL = "redis://127.0.0.1:1/0"
TIMEOUT_S = 0.1
LIMITS = {"requests_per_minute": 10, "concurrent_requests": 5}


@REAL_REDIS_ONLY  # replicas are separate OS processes; the embedded stand-in is per process
def test_two_replicas_enforce_one_requests_per_minute_limit_together(
    prefix: str, redis_client: object
) -> None:
    limit, attempts, replicas = 200, 300, 2
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(replicas), context.SimpleQueue()
    processes = [
        context.Process(
            target=workers.hammer,
            args=(REDIS_URL, prefix, {"requests_per_minute": limit}, attempts, start, results),
        )
        for _ in range(replicas)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    admitted = [results.get() for _ in processes]
    assert all(count > 0 for count in admitted)  # both replicas really took part
    assert 0.95 * limit <= sum(admitted) <= 1.05 * limit


@pytest.fixture
def silent_port() -> Iterator[str]:
    """A Redis URL whose server accepts connections and never answers (a hung Redis)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    server.close()


# Redis down or hung is a network condition (closed and silent ports): real Redis clients only.
async def test_redis_down_fails_closed_with_503_by_default() -> None:
    gate = TenantQuotas(CLOSED_PORT_URL, timeout_s=TIMEOUT_S)
    with pytest.raises(LimiterUnavailable) as refused:
        await gate.admit("t1", LIMITS, request_id="a", stream=False, estimated_tokens=1)
    assert refused.value.status_code == 503
    assert refused.value.code == "rate_limiter_unavailable"
    assert "Retry-After" in refused.value.headers


async def test_a_hung_redis_is_decided_within_a_few_timeouts_not_seconds(
    silent_port: str,
) -> None:
    gate = TenantQuotas(silent_port, timeout_s=TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(LimiterUnavailable):
        await gate.admit("t1", LIMITS, request_id="a", stream=False, estimated_tokens=1)
    assert time.monotonic() - started < 5 * TIMEOUT_S


async def test_redis_down_with_fail_open_admits_without_limits() -> None:
    gate = TenantQuotas(CLOSED_PORT_URL, timeout_s=TIMEOUT_S, fail_mode="open")
    tickets = [
        await gate.admit("t1", LIMITS, request_id=f"r{i}", stream=True, estimated_tokens=1)
        for i in range(20)  # twice the per-minute limit
    ]
    assert all(ticket.degraded for ticket in tickets)
    async with gate.hold(tickets[0]):  # renewing and releasing without Redis do not raise
        pass


async def test_an_unknown_fail_mode_is_refused_at_startup() -> None:
    with pytest.raises(ValueError, match="fail_mode"):
        TenantQuotas(REDIS_URL, fail_mode="maybe")  # type: ignore[arg-type]
