"""deploy/images/wait_for_schema.py, the initContainer that holds API, worker and beat pods
until the migration Job has run, against a real (SQLite) database."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from loraplex.db import migrate
from tests.unit.deploy import support


def script() -> ModuleType:
    path = support.IMAGES / "wait_for_schema.py"
    spec = importlib.util.spec_from_file_location("wait_for_schema", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_verdicts() -> None:
    verdict = script().schema_verdict
    assert verdict(set(), {"b"}, {"a", "b"}) is None  # empty database
    assert verdict({"a"}, {"b"}, {"a", "b"}) is None  # older: the Job has not run yet
    assert verdict({"b"}, {"b"}, {"a", "b"}) == "head"
    assert verdict({"c"}, {"b"}, {"a", "b"}) == "newer"  # a newer release migrated first


def test_waits_for_the_migration_then_passes(tmp_path: Path, capsys) -> None:
    wait = script()
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    assert wait.wait(url, timeout_s=0.3, interval_s=0.1) == 1  # nothing migrated
    migrate.upgrade(url)
    assert wait.wait(url, timeout_s=5, interval_s=0.1) == 0
    assert "schema ready (head)" in capsys.readouterr().out


def test_accepts_a_newer_schema(tmp_path: Path) -> None:
    wait = script()
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    migrate.upgrade(url)

    async def pretend_newer() -> None:
        engine = create_async_engine(url)
        async with engine.begin() as connection:
            await connection.execute(text("UPDATE alembic_version SET version_num = 'zz_future'"))
        await engine.dispose()

    asyncio.run(pretend_newer())
    assert wait.wait(url, timeout_s=5, interval_s=0.1) == 0


def test_unreachable_database_times_out(capsys) -> None:
    # PostgreSQL through asyncpg, as in production; nothing listens on loopback port 1.
    url = "postgresql+asyncpg://loraplex:unused@127.0.0.1:1/loraplex"
    assert script().wait(url, timeout_s=0.3, interval_s=0.1) == 1
    assert "database not reachable yet" in capsys.readouterr().out
