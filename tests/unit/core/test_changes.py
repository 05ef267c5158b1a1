"""Cache-dropping announcements: delivered when their transaction commits, never after a
rollback, and heard by the other replicas through Redis."""

from __future__ import annotations

import asyncio
import threading
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
        await session.execute(text("SELECT 1"))  # a transaction is open
        yield session
    await engine.dispose()


@pytest.fixture
async def heard() -> AsyncIterator[list[Announcement]]:
    """What a running feed of this process hears."""
    heard: list[Announcement] = []
    feed = ChangeFeed(None)
    feed.listen(heard.append)
    await feed.start()
    yield heard
    await feed.stop()


async def test_an_announcement_is_delivered_when_its_transaction_commits(
    session: AsyncSession, heard: list[Announcement]
) -> None:
    announce(session, Change.KEY_REVOKED, "lpx_abc")
    assert heard == []  # not before the commit
    await session.commit()
    assert heard == [Announcement(Change.KEY_REVOKED, "lpx_abc")]


async def test_a_rolled_back_change_is_never_announced(
    session: AsyncSession, heard: list[Announcement]
) -> None:
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


async def test_a_savepoint_neither_delivers_early_nor_drops_the_outer_announcement(
    session: AsyncSession, heard: list[Announcement]
) -> None:
    announce(session, Change.KEY_REVOKED, "lpx_outer")
    async with session.begin_nested():
        announce(session, Change.TENANT_LIMITS)
    assert heard == []  # released savepoint: the outer transaction has not committed yet
    savepoint = await session.begin_nested()
    await savepoint.rollback()
    await session.commit()
    assert Announcement(Change.KEY_REVOKED, "lpx_outer") in heard


async def test_a_commit_on_another_loop_is_delivered_on_the_feeds_own_loop(
    session: AsyncSession,
) -> None:
    # As in the test suite, where the app runs on its client's loop and a test commits on
    # its own: the feed's listeners and Redis connections must stay on the feed's loop.
    heard: list[tuple[Announcement, asyncio.AbstractEventLoop]] = []
    started = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    def app_loop() -> None:
        loop = asyncio.new_event_loop()
        feed = ChangeFeed(None)
        feed.listen(lambda a: heard.append((a, asyncio.get_running_loop())))
        loop.run_until_complete(feed.start())
        loops.append(loop)
        started.set()
        loop.run_forever()
        loop.run_until_complete(feed.stop())
        loop.close()

    thread = threading.Thread(target=app_loop)
    thread.start()
    try:
        started.wait(5)
        announce(session, Change.KEY_REVOKED, "lpx_elsewhere")
        await session.commit()
        for _ in range(100):
            if heard:
                break
            await asyncio.sleep(0.01)
    finally:
        loops[0].call_soon_threadsafe(loops[0].stop)
        thread.join(5)
    assert heard == [(Announcement(Change.KEY_REVOKED, "lpx_elsewhere"), loops[0])]
