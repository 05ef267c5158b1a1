"""Cache-dropping announcements: delivered when their transaction commits, never after a
rollback, and heard by the other replicas through Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from loraplex.changes import Announcement, Change, ChangeFeed, announce
from tests.conftest import REDIS_URL


@pytest.fixture
async def session() -> AsyncIterator[AsyncSession]:
    engine = create_async_engine("sqlite+aiosqlite://")
    async with AsyncSession(engine) as session:
        yield session
    await engine.dispose()


@pytest.fixture
async def feed() -> AsyncIterator[tuple[ChangeFeed, list[Announcement]]]:
    heard: list[Announcement] = []
    feed = ChangeFeed(None)
    feed.listen(heard.append)
    await feed.start()
    yield feed, heard
    await feed.stop()


async def test_an_announcement_is_delivered_when_its_transaction_commits(
    session: AsyncSession, feed: tuple[ChangeFeed, list[Announcement]]
) -> None:
    _, heard = feed
    await session.execute(text("SELECT 1"))
    announce(session, Change.KEY_REVOKED, "lpx_abc")
    assert heard == []  # not before the commit
    await session.commit()
    assert heard == [Announcement(Change.KEY_REVOKED, "lpx_abc")]


async def test_a_rolled_back_change_is_never_announced(
    session: AsyncSession, feed: tuple[ChangeFeed, list[Announcement]]
) -> None:
    _, heard = feed
    await session.execute(text("SELECT 1"))
    announce(session, Change.TENANT_LIMITS)
    await session.rollback()
    await session.execute(text("SELECT 1"))
    await session.commit()
    assert heard == []


async def test_another_replica_hears_a_change_through_redis() -> None:
    here, there = Redis.from_url(REDIS_URL), Redis.from_url(REDIS_URL)
    channel = "loraplex:changes:test"
    mine, theirs = ChangeFeed(here, channel), ChangeFeed(there, channel)
    heard_here: list[Announcement] = []
    heard_there: list[Announcement] = []
    mine.listen(heard_here.append)
    theirs.listen(heard_there.append)
    await theirs.start()
    try:
        for _ in range(100):  # wait until the other replica is subscribed
            if (await here.pubsub_numsub(channel))[0][1] >= 1:
                break
            await asyncio.sleep(0.02)
        mine.committed([Announcement(Change.TENANT_ACCESS, "t1")])
        await mine.stop()  # finishes publishing
        for _ in range(100):
            if heard_there:
                break
            await asyncio.sleep(0.02)
        assert heard_there == [Announcement(Change.TENANT_ACCESS, "t1")]
        assert heard_here == [Announcement(Change.TENANT_ACCESS, "t1")]  # once, not echoed
    finally:
        await theirs.stop()
        await here.aclose()
        await there.aclose()
