"""The SQLAlchemy configuration shared by the API, the CLI and the workers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from advanced_alchemy.config import EngineConfig
from advanced_alchemy.extensions.litestar import AsyncSessionConfig, SQLAlchemyAsyncConfig

from loraplex.changes import ChangeFeed
from loraplex.connections import shared_redis
from loraplex.settings import Settings

T = TypeVar("T")


def sqlalchemy_config(settings: Settings) -> SQLAlchemyAsyncConfig:
    """Async engine + session config; the session commits when a handler answers 2xx/3xx."""
    engine = EngineConfig(pool_pre_ping=True)
    if settings.database_url.startswith("postgresql"):
        engine = EngineConfig(
            pool_pre_ping=True,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
        )
    return SQLAlchemyAsyncConfig(
        connection_string=settings.database_url,
        engine_config=engine,
        session_config=AsyncSessionConfig(expire_on_commit=False),
        before_send_handler="autocommit",
        create_all=False,  # the schema belongs to Alembic
    )


def run_in_session(settings: Settings, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work(session)` in one committed transaction, from synchronous code (the CLI);
    changes it announces (loraplex.changes) are published to the API replicas."""

    async def run() -> T:
        config = sqlalchemy_config(settings)
        # What the work changes in keys or limits reaches the API replicas' caches at once.
        redis = shared_redis(settings) if settings.redis_url else None
        changes = ChangeFeed(redis)
        await changes.start(subscribe=False)
        try:
            async with config.get_session() as session:
                result = await work(session)
                await session.commit()
                return result
        finally:
            await changes.stop()
            if redis is not None:
                await redis.aclose()
            await config.get_engine().dispose()

    return asyncio.run(run())
