"""Resume readers hold a place under their tenant's stream limit and one of the process's
reader places, until they end (on the embedded Redis: the same admission scripts)."""

from __future__ import annotations

import gc
import uuid
from collections.abc import AsyncIterator

import pytest

from loraplex.errors import NotFound
from loraplex.gateway.admission import RateLimited, TenantQuotas
from loraplex.gateway.resume_readers import ResumeReaders, TooManyReaders
from loraplex.observability.metrics import TENANT_LIMIT_REFUSALS
from loraplex.redis_client import embedded_redis

LIMITS = {"concurrent_streams": 2, "requests_per_minute": 1}


async def _events() -> AsyncIterator[bytes]:
    yield b"data: 1\n\n"
    yield b"data: 2\n\n"


async def _open() -> AsyncIterator[bytes]:
    return _events()


def _readers(max_readers: int = 100) -> ResumeReaders:
    quotas = TenantQuotas(embedded_redis(), key_prefix="t:resume:", reason_prefix="resume_")
    return ResumeReaders(quotas, max_readers)


def _refusals(reason: str) -> float:
    return sum(
        sample.value
        for metric in TENANT_LIMIT_REFUSALS.collect()
        for sample in metric.samples
        if sample.labels.get("reason") == reason and sample.name.endswith("_total")
    )


async def test_a_tenant_follows_no_more_resumed_streams_than_its_plan_allows() -> None:
    readers, tenant = _readers(), uuid.uuid4()
    held = [await readers.follow(tenant, LIMITS, _open) for _ in range(2)]
    before = _refusals("resume_streams")
    with pytest.raises(RateLimited) as refused:
        await readers.follow(tenant, LIMITS, _open)
    assert refused.value.code == "rate_limit_exceeded"
    assert "concurrent_streams" in refused.value.detail
    assert refused.value.headers["Retry-After"]
    assert _refusals("resume_streams") == before + 1
    assert len(held) == 2


async def test_another_tenants_readers_are_not_refused_for_the_first_ones() -> None:
    readers = _readers()
    first, other = uuid.uuid4(), uuid.uuid4()
    held = [await readers.follow(first, LIMITS, _open) for _ in range(2)]
    held.append(await readers.follow(other, LIMITS, _open))  # no refusal


async def test_rate_limits_other_than_streams_do_not_apply_to_readers() -> None:
    readers, tenant = _readers(), uuid.uuid4()
    for _ in range(3):  # requests_per_minute is 1; a reader is not a request
        events = await readers.follow(tenant, LIMITS, _open)
        assert [e async for e in events] == [b"data: 1\n\n", b"data: 2\n\n"]


async def test_a_finished_reader_gives_back_both_places() -> None:
    readers, tenant = _readers(max_readers=2), uuid.uuid4()
    for _ in range(5):
        events = await readers.follow(tenant, LIMITS, _open)
        async for _ in events:
            pass
    assert readers.active == 0


async def test_past_the_process_cap_a_reader_gets_503_with_retry_after() -> None:
    readers = _readers(max_readers=2)
    held = [await readers.follow(uuid.uuid4(), LIMITS, _open) for _ in range(2)]
    before = _refusals("resume_readers")
    with pytest.raises(TooManyReaders) as refused:
        await readers.follow(uuid.uuid4(), LIMITS, _open)
    assert refused.value.status_code == 503
    assert refused.value.headers["Retry-After"] == "1"
    assert _refusals("resume_readers") == before + 1
    assert len(held) == 2


async def test_a_reader_never_iterated_gives_back_its_place_when_dropped() -> None:
    readers = _readers(max_readers=1)
    events = await readers.follow(uuid.uuid4(), LIMITS, _open)
    assert readers.active == 1
    del events
    gc.collect()
    assert readers.active == 0


async def test_a_stream_of_another_tenant_takes_no_place() -> None:
    readers, tenant = _readers(max_readers=1), uuid.uuid4()

    async def not_theirs() -> AsyncIterator[bytes]:
        raise NotFound("no resumable stream x")

    for _ in range(3):
        with pytest.raises(NotFound):
            await readers.follow(tenant, LIMITS, not_theirs)
    assert readers.active == 0
    await readers.follow(tenant, LIMITS, _open)  # its own stream still has room
