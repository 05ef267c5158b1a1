"""Concurrency slots as expiring leases, in the real Redis and in the embedded stand-in,
including a killed holder (real Redis only)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time

import pytest

from loraplex.gateway.admission import RateLimited, TenantQuotas, Ticket
from tests.integration.gateway_admission import workers
from tests.integration.gateway_admission.conftest import (
    REAL_REDIS_ONLY,
    REDIS_URL,
    Backend,
    FakeClock,
)

SLOTS = {"concurrent_requests": 2, "concurrent_streams": 1}


async def admit(gate: TenantQuotas, request_id: str, *, stream: bool = False) -> Ticket:
    """Admit tenant "t1"'s request `request_id` against SLOTS."""
    return await gate.admit("t1", SLOTS, request_id=request_id, stream=stream, estimated_tokens=1)


async def test_requests_past_the_concurrency_limit_are_refused(admission: TenantQuotas) -> None:
    await admit(admission, "a")
    await admit(admission, "b")
    with pytest.raises(RateLimited) as refused:
        await admit(admission, "c")
    assert refused.value.code == "rate_limit_exceeded"
    assert "in flight" in refused.value.detail


async def test_releasing_a_request_frees_its_slot(admission: TenantQuotas) -> None:
    first = await admit(admission, "a")
    await admit(admission, "b")
    await admission.release(first, actual_tokens=1)
    await admit(admission, "c")


async def test_streams_have_their_own_limit_within_the_requests_limit(
    admission: TenantQuotas,
) -> None:
    await admit(admission, "s1", stream=True)
    with pytest.raises(RateLimited) as refused:
        await admit(admission, "s2", stream=True)
    assert "streams" in refused.value.detail
    await admit(admission, "plain")  # a non-streaming request still fits


async def test_an_unrenewed_lease_expires_after_the_lease_time(
    admission: TenantQuotas, clock: FakeClock
) -> None:
    await admit(admission, "a")
    await admit(admission, "b")
    clock.advance(admission.lease_s - 0.1)
    with pytest.raises(RateLimited):
        await admit(admission, "c")
    clock.advance(0.2)
    await admit(admission, "c")


async def test_hold_renews_the_lease_past_the_lease_time(
    backend: Backend, prefix: str, redis_client: object
) -> None:
    gate = backend.admission(key_prefix=prefix, lease_s=0.6)
    try:
        async with gate.hold(await admit(gate, "s1", stream=True)):
            await asyncio.sleep(1.0)  # past the lease: only renewals keep the slot
            with pytest.raises(RateLimited):
                await admit(gate, "s2", stream=True)
        await admit(gate, "s3", stream=True)  # leaving `hold` released it
    finally:
        await gate.aclose()


async def test_hold_gives_back_the_tokens_the_request_did_not_use(
    admission: TenantQuotas,
) -> None:
    limits = {"tokens_per_minute": 1000}
    ticket = await admission.admit(
        "t1", limits, request_id="a", stream=False, estimated_tokens=1000
    )
    async with admission.hold(ticket):
        ticket.actual_tokens = 400
    after = await admission.admit("t1", limits, request_id="b", stream=False, estimated_tokens=600)
    assert after.headers["x-ratelimit-remaining-tokens"] == "0"


@REAL_REDIS_ONLY  # the holder is another OS process; the embedded stand-in is per process
async def test_a_killed_replica_frees_its_streams_within_the_lease_time(
    prefix: str, redis_client: object
) -> None:
    lease_s, slots = 2.0, 3
    context = multiprocessing.get_context("spawn")
    holding = context.Event()
    child = context.Process(
        target=workers.hold_slots, args=(REDIS_URL, prefix, slots, lease_s, holding)
    )
    child.start()
    gate = TenantQuotas(REDIS_URL, key_prefix=prefix, lease_s=lease_s)
    limits = {"concurrent_requests": slots, "concurrent_streams": slots}
    try:
        assert await asyncio.to_thread(holding.wait, 30)
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        killed_at = time.monotonic()
        with pytest.raises(RateLimited):
            await gate.admit("victim", limits, request_id="new", stream=True, estimated_tokens=1)
        freed = await _poll_until_admitted(gate, limits, deadline_s=3 * lease_s)
        assert freed - killed_at <= lease_s + 1.0
    finally:
        child.join(5)
        await gate.aclose()


async def _poll_until_admitted(
    gate: TenantQuotas, limits: dict[str, int], deadline_s: float
) -> float:
    """Retry an admission every 50 ms; returns when it got in."""
    give_up = time.monotonic() + deadline_s
    while time.monotonic() < give_up:
        try:
            await gate.admit("victim", limits, request_id="new", stream=True, estimated_tokens=1)
            return time.monotonic()
        except RateLimited:
            await asyncio.sleep(0.05)
    raise AssertionError("the dead replica's slots were never freed")
