"""Redis behind a password (an ACL user): the platform connects with `user:password` in the
URL, and the password shows up in no repr, readiness answer or Celery banner URI.

The ACL user is made for this test on the shared server and removed after; the server's
default user, which the rest of the suite uses, is left as it is.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError

from loraplex.app import create_app
from loraplex.connections import shared_redis
from loraplex.settings import Settings
from loraplex.workers.celery_app import make_celery
from tests.conftest import REDIS_URL

PASSWORD = secrets.token_urlsafe(24)


@pytest.fixture
async def acl_user() -> AsyncIterator[str]:
    """A Redis ACL user with a random password; yields the URL that logs in as it."""
    admin = Redis.from_url(REDIS_URL)
    user = f"loraplex-test-{secrets.token_hex(3)}"
    await admin.execute_command("ACL", "SETUSER", user, "on", f">{PASSWORD}", "~*", "&*", "+@all")
    host_and_db = REDIS_URL.split("://", 1)[1]
    try:
        yield f"redis://{user}:{PASSWORD}@{host_and_db}"
    finally:
        await admin.execute_command("ACL", "DELUSER", user)
        await admin.aclose()


async def test_the_platforms_client_logs_in_with_the_urls_password(
    settings: Settings, acl_user: str
) -> None:
    redis = shared_redis(replace(settings, redis_url=acl_user))
    try:
        assert await redis.ping()
        whoami = await redis.execute_command("ACL", "WHOAMI")
        assert whoami.decode().startswith("loraplex-test-")
    finally:
        await redis.aclose()


async def test_a_wrong_password_is_refused(settings: Settings, acl_user: str) -> None:
    redis = shared_redis(replace(settings, redis_url=acl_user.replace(PASSWORD, "wrong")))
    try:
        with pytest.raises(AuthenticationError):
            await redis.ping()
    finally:
        await redis.aclose()


def test_the_password_is_in_no_repr_and_no_celery_uri(settings: Settings, acl_user: str) -> None:
    with_password = replace(settings, redis_url=acl_user)
    assert PASSWORD not in repr(with_password) and "***" in repr(with_password)
    celery = make_celery(with_password)
    try:
        assert PASSWORD not in celery.connection_for_write().as_uri()
    finally:
        celery.close()


async def test_readiness_names_the_failure_not_the_password(
    settings: Settings, acl_user: str
) -> None:
    wrong = replace(settings, redis_url=acl_user.replace(PASSWORD, "not-" + PASSWORD))
    async with AsyncTestClient(app=create_app(wrong)) as client:
        response = await client.get("/readyz/dependencies")
    assert response.status_code == 503
    assert response.json()["redis"] == "error: AuthenticationError"
    assert PASSWORD not in response.text
