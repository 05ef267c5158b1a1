"""A database or object store that is down answers 503 with Retry-After, and the client's
body names no address, port or exception (found by tests/system's PostgreSQL and S3 drills)."""

from __future__ import annotations

import pytest
from litestar import Litestar, get
from litestar.testing import TestClient
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import DBAPIError

from loraplex.adapters.errors import StoreUnavailable
from loraplex.errors import exception_handlers
from tests.support.hygiene import leaks


class _Orig(Exception):
    sqlstate = "57P03"  # cannot_connect_now: PostgreSQL is starting up


def _raising(exc: Exception) -> Litestar:
    @get("/v1/models")
    async def models() -> None:
        raise exc

    @get("/api/v1/things")
    async def things() -> None:
        raise exc

    return Litestar([models, things], exception_handlers=exception_handlers())


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connect call failed ('10.0.0.5', 5432)"),
        DBAPIError("SELECT 1", None, _Orig("the database system is starting up")),
        DBAPIError(
            "SELECT 1", None, Exception("10.0.0.5:5432 closed"), connection_invalidated=True
        ),
        StoreUnavailable("Could not connect to the endpoint URL: http://10.0.0.5:9000/bucket"),
        RedisConnectionError("No connection available."),  # a capped pool, all busy
        RedisConnectionError("Error 111 connecting to 10.0.0.7:6379. Connection refused."),
    ],
    ids=["refused", "starting-up", "invalidated", "object-store", "redis-pool", "redis-down"],
)
@pytest.mark.parametrize("path", ["/v1/models", "/api/v1/things"])
def test_a_dependency_down_is_a_clean_503_with_retry_after(exc: Exception, path: str) -> None:
    with TestClient(_raising(exc)) as client:
        response = client.get(path)
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) > 0
    assert leaks(response.text) == []
