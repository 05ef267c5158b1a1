"""Embedded mode (no `LORAPLEX_REDIS_URL`): the process's services run on the in-process
Redis stand-in, so tenant quotas and resumable streams work as with a real Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from loraplex.app import create_app
from loraplex.db import migrate
from loraplex.db.config import sqlalchemy_config
from loraplex.gateway.admission import RateLimited, TenantQuotas
from loraplex.redis_client import embedded_redis, open_redis
from loraplex.services import Services, running_services
from loraplex.settings import Settings


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Services]:
    """The services of an embedded API process (SQLite, no Redis URL), running."""
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/loraplex.db", data_dir=tmp_path
    )
    assert settings.redis_url == ""
    await asyncio.to_thread(migrate.upgrade, settings.database_url)
    db = sqlalchemy_config(settings)
    try:
        async with running_services(settings, db) as services:
            yield services
    finally:
        await db.get_engine().dispose()


async def test_embedded_mode_enforces_tenant_quotas(embedded: Services) -> None:
    assert isinstance(embedded.quotas, TenantQuotas)
    tenant, limits = str(uuid.uuid4()), {"requests_per_minute": 1}
    await embedded.quotas.admit(tenant, limits, request_id="a", stream=False, estimated_tokens=1)
    with pytest.raises(RateLimited) as refused:
        await embedded.quotas.admit(
            tenant, limits, request_id="b", stream=False, estimated_tokens=1
        )
    assert refused.value.status_code == 429


async def test_embedded_clients_of_one_process_share_one_server(
    embedded: Services,
) -> None:
    tenant = str(uuid.uuid4())
    await embedded.quotas.admit(
        tenant, {"requests_per_minute": 5}, request_id="a", stream=False, estimated_tokens=1
    )
    other = open_redis("")
    isolated = embedded_redis()  # a server of its own sees none of it
    try:
        assert await other.keys(f"*{tenant}*") and not await isolated.keys(f"*{tenant}*")
    finally:
        await other.aclose()
        await isolated.aclose()


async def test_embedded_mode_keeps_resumable_streams(embedded: Services) -> None:
    streams, tenant = embedded.gateway.resumable, uuid.uuid4()
    completion_id = f"cmpl-{uuid.uuid4().hex}"

    async def batches() -> AsyncIterator[list[bytes]]:
        yield [b"data: first\n\n", b"data: second\n\n"]

    engine_side = asyncio.create_task(asyncio.sleep(0))
    await streams.open(completion_id, tenant)
    await streams.write(completion_id, tenant, batches(), engine_side)
    replay = await streams.read(completion_id, tenant, last_event_id=0)
    assert [event async for event in replay] == [b"data: second\n\n"]


async def test_readyz_pings_the_embedded_stand_in(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/loraplex.db", data_dir=tmp_path
    )
    async with AsyncTestClient(app=create_app(settings)) as client:
        response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "database": "ok", "redis": "embedded"}
