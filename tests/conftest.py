"""Session-wide fixtures: a fresh PostgreSQL database, Redis, the app and its clients.

PostgreSQL and Redis are the real servers on loopback (`make test` makes sure they run).
Each test session gets its own database, migrated to head, dropped at the end.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from loraplex.app import create_app
from loraplex.control.bootstrap import create_operator
from loraplex.db import migrate
from loraplex.db.config import sqlalchemy_config
from loraplex.settings import Settings
from tests.support.hygiene import check_error_body
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

PG_SERVER = os.environ.get("LORAPLEX_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request drowns failures

REDIS_URL = os.environ.get("LORAPLEX_TEST_REDIS", "redis://127.0.0.1:6379/15")
METRICS_TOKEN = f"scrape-{secrets.token_urlsafe(24)}"  # the suite's Prometheus
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def _asyncpg_url(database: str) -> str:
    return f"{PG_SERVER.replace('postgresql://', 'postgresql+asyncpg://')}/{database}"


async def create_database(name: str) -> str:
    """Create an empty PostgreSQL database and return its SQLAlchemy URL."""
    conn = await asyncpg.connect(f"{PG_SERVER}/postgres")
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return _asyncpg_url(name)


async def drop_database(name: str) -> None:
    """Drop a test database, disconnecting stragglers."""
    conn = await asyncpg.connect(f"{PG_SERVER}/postgres")
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def database_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database for this test session, migrated to head."""
    name = f"loraplex_test_{secrets.token_hex(4)}"
    url = await create_database(name)
    await asyncio.to_thread(migrate.upgrade, url)  # Alembic's env runs its own event loop
    yield url
    await drop_database(name)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3 HTTP server (moto's server mode) on loopback, for the whole session."""
    with S3Server() as server:
        yield server


@pytest.fixture(scope="session")
def settings(
    database_url: str, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Settings pointing at the session's database, Redis and S3 server."""
    return Settings(
        database_url=database_url,
        # Each of the suite's in-process apps and API processes keeps few idle connections:
        # together they stay under PostgreSQL's default 100 (at 10 each, make test ran out).
        db_pool_size=2,
        redis_url=REDIS_URL,
        # This session's Celery tasks under keys of its own: a worker of another session on
        # this machine, or one a killed run left behind, would otherwise take them.
        broker_key_prefix=f"loraplex-test-{secrets.token_hex(4)}:",
        data_dir=tmp_path_factory.mktemp("data"),
        object_store="s3",
        max_upload_bytes=16 * 2**20,  # small, so size-cap tests stay fast
        # The suite's tests ask for adapters they have just uploaded and read where each
        # was found: cold until asked. Warming at upload has tests of its own that turn it on.
        warm_on_upload=False,
        s3_endpoint_url=s3_server.endpoint_url,
        s3_bucket=f"adapters-{secrets.token_hex(4)}",
        s3_region=REGION,
        s3_access_key_id=ACCESS_KEY,
        s3_secret_access_key=SECRET_KEY,
        # No places on the engines: the suite's stand-in engines run its concurrent requests
        # at once, and places sized for a real engine would shed them. Admission's places have
        # their own tests (tests/unit/gateway/test_gate.py, the core's, the simulator's).
        engine_admission=False,
        # Every console test signs in from the in-process client's one address, which the
        # sign-in throttle allows 10x this per minute: the suite's bursts passed 100.
        login_attempts_per_minute=30,
        # Outside local mode the API refuses placeholder secrets and an open /metrics; the
        # suite speaks plain HTTP, where a browser (and httpx) drops `Secure` cookies.
        secret_key=secrets.token_urlsafe(32),
        metrics_token=METRICS_TOKEN,
        secure_cookies="false",
        # No periodic probe replays in the suite (the probe drill runs its own).
        probe_every_s=0.0,
    )


@pytest.fixture(scope="session")
async def app(settings: Settings) -> Litestar:
    """The application under test."""
    return create_app(settings)


@pytest.fixture(scope="session")
async def client(app: Litestar) -> AsyncIterator[AsyncTestClient[Litestar]]:
    """An HTTP client speaking to the app in-process (lifespan included). Every error it
    receives is checked for internal detail (tests/support/hygiene.py)."""
    async with AsyncTestClient(app=app) as test_client:
        test_client.event_hooks = {"request": [], "response": [check_error_body]}
        yield test_client


@pytest.fixture(scope="session")
async def operator_key(settings: Settings) -> str:
    """An operator API key, made the way `loraplex admin create-operator` makes it."""
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        key = await create_operator(session, f"ops-{secrets.token_hex(3)}@example.com", "ops")
        await session.commit()
    await config.get_engine().dispose()
    return key


@dataclass
class Api:
    """A client bound to one API key, so tests read as `api.get(...)`."""

    client: AsyncTestClient[Litestar]
    key: str

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **(extra or {})}

    async def get(self, path: str, **kw: Any) -> Any:
        """GET with this key."""
        return await self.client.get(path, headers=self._headers(kw.pop("headers", None)), **kw)

    async def post(self, path: str, **kw: Any) -> Any:
        """POST with this key."""
        return await self.client.post(path, headers=self._headers(kw.pop("headers", None)), **kw)

    async def put(self, path: str, **kw: Any) -> Any:
        """PUT with this key."""
        return await self.client.put(path, headers=self._headers(kw.pop("headers", None)), **kw)

    async def patch(self, path: str, **kw: Any) -> Any:
        """PATCH with this key."""
        return await self.client.patch(path, headers=self._headers(kw.pop("headers", None)), **kw)

    async def delete(self, path: str, **kw: Any) -> Any:
        """DELETE with this key."""
        return await self.client.delete(path, headers=self._headers(kw.pop("headers", None)), **kw)

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        """Any method with this key."""
        return await self.client.request(
            method, path, headers=self._headers(kw.pop("headers", None)), **kw
        )


@dataclass
class TenantHandle:
    """A tenant made for a test, with an admin-scoped key."""

    id: str
    slug: str
    api: Api


@pytest.fixture(scope="session")
def operator(client: AsyncTestClient[Litestar], operator_key: str) -> Api:
    """The client as an operator."""
    return Api(client, operator_key)


@pytest.fixture
def make_tenant(operator: Api, client: AsyncTestClient[Litestar]) -> Any:
    """Factory: create a tenant and an admin key for it."""

    async def make(
        plan: str = "pro", scopes: tuple[str, ...] = ("admin", "inference", "fine-tune")
    ) -> TenantHandle:
        slug = f"t-{secrets.token_hex(4)}"
        response = await operator.post(
            "/api/v1/tenants", json={"slug": slug, "name": slug, "plan": plan}
        )
        assert response.status_code == 201, response.text
        tenant_id = response.json()["id"]
        response = await operator.post(
            f"/api/v1/tenants/{tenant_id}/api-keys", json={"name": "admin", "scopes": list(scopes)}
        )
        assert response.status_code == 201, response.text
        return TenantHandle(tenant_id, slug, Api(client, response.json()["key"]))

    return make


@pytest.fixture(scope="session")
def repo_root() -> Iterator[str]:
    """The repository root."""
    yield os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
