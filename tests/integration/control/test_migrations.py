"""Migrations go up, down and up again on PostgreSQL and SQLite, and match the models."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.ext.asyncio import create_async_engine

from loraplex.db import migrate
from loraplex.db.models import Base
from loraplex.migrations.compare import compare_type as _compare_type
from tests.conftest import create_database, drop_database

TABLES = {
    "tenants",
    "plans",
    "quota_overrides",
    "users",
    "api_keys",
    "base_models",
    "adapters",
    "adapter_versions",
    "adapter_aliases",
    "engines",
    "audit_log",
}


async def _tables_and_diff(url: str) -> tuple[set[str], list[object]]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
            diff = await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"compare_type": _compare_type}),
                    Base.metadata,
                )
            )
    finally:
        await engine.dispose()
    return tables, diff


async def _round_trip(url: str) -> None:
    await asyncio.to_thread(migrate.upgrade, url)
    tables, diff = await _tables_and_diff(url)
    assert tables >= TABLES
    assert diff == [], f"models and migrations disagree: {diff}"
    await asyncio.to_thread(migrate.downgrade, url)
    tables, _ = await _tables_and_diff(url)
    assert tables <= {"alembic_version"}
    await asyncio.to_thread(migrate.upgrade, url)
    tables, _ = await _tables_and_diff(url)
    assert tables >= TABLES


async def test_migrations_round_trip_on_postgresql() -> None:
    name = f"loraplex_mig_{secrets.token_hex(4)}"
    url = await create_database(name)
    try:
        await _round_trip(url)
    finally:
        await drop_database(name)


async def test_migrations_round_trip_on_sqlite(tmp_path: Path) -> None:
    await _round_trip(f"sqlite+aiosqlite:///{tmp_path / 'loraplex.db'}")


@pytest.mark.parametrize("revision", ["0001"])
async def test_downgrade_to_a_middle_revision_keeps_the_schema(
    tmp_path: Path, revision: str
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'mid.db'}"
    await asyncio.to_thread(migrate.upgrade, url)
    await asyncio.to_thread(migrate.downgrade, url, revision)
    tables, _ = await _tables_and_diff(url)
    assert tables >= TABLES
