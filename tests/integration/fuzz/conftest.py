"""The fuzzer's own database, Redis index, data folder and bucket, and an app on them.

The fuzzer registers engines, base models, plans and tenants at random; on the suite's
shared database and Redis index they would leak into other tests (an engine at a random
URL in the rotation, a plan in every listing), so the fuzzer gets a stack of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from litestar import Litestar
from schemathesis.python import asgi

from loraplex.app import create_app
from loraplex.control.bootstrap import create_operator
from loraplex.db import migrate
from loraplex.db.config import sqlalchemy_config
from loraplex.settings import Settings
from tests.conftest import create_database, drop_database

REDIS_INDEX = 14  # the rest of the suite uses 15


@pytest.fixture(scope="module")
async def fuzz_settings(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Settings]:
    """The suite's settings on a database, Redis index, data folder and bucket of their own."""
    name = f"loraplex_fuzz_{secrets.token_hex(4)}"
    url = await create_database(name)
    await asyncio.to_thread(migrate.upgrade, url)
    yield dataclasses.replace(
        settings,
        database_url=url,
        redis_url=settings.redis_url.rsplit("/", 1)[0] + f"/{REDIS_INDEX}",
        data_dir=tmp_path_factory.mktemp("fuzz"),
        s3_bucket=f"fuzz-{secrets.token_hex(4)}",
    )
    await drop_database(name)


@pytest.fixture(scope="module")
async def fuzz_operator_key(fuzz_settings: Settings) -> str:
    """An operator key in the fuzzer's database."""
    config = sqlalchemy_config(fuzz_settings)
    async with config.get_session() as session:
        key = await create_operator(session, f"fuzz-{secrets.token_hex(3)}@example.com", "fuzz")
        await session.commit()
    await config.get_engine().dispose()
    return key


@pytest.fixture(scope="module")
def fuzz_app(fuzz_settings: Settings) -> Iterator[Litestar]:
    """A fresh app for schemathesis to start and drive on its own event loop, stopped after
    (schemathesis would keep it running, on a database about to be dropped, until exit)."""
    yield create_app(fuzz_settings)
    asgi.shutdown_lifespans()
