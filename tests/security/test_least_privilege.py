"""The suite's live platform runs with the credentials issue #43 asks for, and they hold: the
engines refuse a caller without their key, the API's Redis user needs its password and
cannot run admin commands. Every other case of the suite streams B through that engine and
that Redis user, so the API uses both."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
import redis

from tests.security.conftest import Target


def test_the_engine_refuses_a_caller_without_its_key(target: Target) -> None:
    body = {"model": target.model, "messages": [{"role": "user", "content": "tokens=2"}]}
    route = f"{target.engine_url}/v1/chat/completions"
    assert httpx.post(route, json=body, timeout=10).status_code == 401
    wrong = {"Authorization": "Bearer not-the-key"}
    assert httpx.post(route, json=body, headers=wrong, timeout=10).status_code == 401
    right = {"Authorization": f"Bearer {target.engine_key}"}
    assert httpx.post(route, json=body, headers=right, timeout=10).status_code == 200
    # and the API, which sends the key, serves B through it
    assert target.serves()


def test_the_apis_redis_user_needs_its_password_and_runs_no_admin_command(
    target: Target,
) -> None:
    parts = urlsplit(target.redis_url)
    assert parts.username and parts.password
    user = redis.Redis.from_url(target.redis_url)
    try:
        assert user.ping()
        assert user.acl_whoami() in (parts.username, parts.username.encode())
        for admin in (("CONFIG", "GET", "requirepass"), ("ACL", "LIST"), ("CLIENT", "LIST")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                user.execute_command(*admin)
    finally:
        user.close()
    wrong = target.redis_url.replace(f":{parts.password}@", ":wrong@")
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(wrong).ping()
