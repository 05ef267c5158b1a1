"""The SQLAlchemy configuration shared by the API, the CLI and the workers."""

from __future__ import annotations

from advanced_alchemy.config import EngineConfig
from advanced_alchemy.extensions.litestar import AsyncSessionConfig, SQLAlchemyAsyncConfig

from loraplex.settings import Settings


def sqlalchemy_config(settings: Settings) -> SQLAlchemyAsyncConfig:
    """Async engine + session config; the session commits when a handler answers 2xx/3xx."""
    engine = EngineConfig(pool_pre_ping=True)
    if settings.database_url.startswith("postgresql"):
        engine = EngineConfig(pool_pre_ping=True, pool_size=10, max_overflow=20)
    return SQLAlchemyAsyncConfig(
        connection_string=settings.database_url,
        engine_config=engine,
        session_config=AsyncSessionConfig(expire_on_commit=False),
        before_send_handler="autocommit",
        create_all=False,  # the schema belongs to Alembic
    )
