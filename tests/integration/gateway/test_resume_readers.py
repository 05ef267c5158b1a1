"""Resume readers against a live API process: each holds a place under its tenant's stream
limit and one of the process's reader places; a capped Redis pool refuses, never hangs.

The streams are planted in Redis the way the gateway writes them (an owner record and
events, no end yet), so readers follow them live and stay open without an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from redis import Redis as SyncRedis

from loraplex.bench.server import api_process
from loraplex.connections import connect_redis
from loraplex.settings import Settings
from tests.conftest import REDIS_URL

MAX_READERS = 3


@pytest.fixture(scope="module")
def api(gateway_settings: Settings) -> Iterator[str]:
    """An API process that follows at most MAX_READERS resumed streams at once."""
    settings = replace(gateway_settings, resume_max_readers=MAX_READERS)
    with api_process(settings.to_env()) as (url, _pid):
        yield url


def _tenant(url: str, operator_key: str, plan: str = "free") -> dict[str, str]:
    ops = {"Authorization": f"Bearer {operator_key}"}
    slug = f"rr-{secrets.token_hex(3)}"
    tenant = httpx.post(
        f"{url}/api/v1/tenants", json={"slug": slug, "name": slug, "plan": plan}, headers=ops
    ).json()
    key = httpx.post(
        f"{url}/api/v1/tenants/{tenant['id']}/api-keys",
        json={"name": "rr", "scopes": ["inference"]},
        headers=ops,
    ).json()["key"]
    return {"id": tenant["id"], "Authorization": f"Bearer {key}"}


def _planted(tenant_id: str) -> str:
    """A live resumable stream of `tenant_id` with one event and no end."""
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    with SyncRedis.from_url(REDIS_URL) as redis:
        redis.set(f"lpx:sse:{completion_id}:tenant", tenant_id, px=60_000)
        redis.xadd(f"lpx:sse:{completion_id}", {"e": b"id: 0\ndata: {}\n\n"}, id="1-0")
        redis.pexpire(f"lpx:sse:{completion_id}", 60_000)
    return completion_id


@contextlib.contextmanager
def _reading(url: str, tenant: dict[str, str], completion_id: str) -> Iterator[httpx.Response]:
    """A reader of the stream, open until the block ends (its first bytes are read)."""
    headers = {"Authorization": tenant["Authorization"]}
    with (
        httpx.Client(timeout=10) as http,
        http.stream(
            "GET", f"{url}/v1/chat/completions/{completion_id}/events", headers=headers
        ) as response,
    ):
        chunks = response.iter_raw()  # kept: a dropped iterator closes the connection
        if response.status_code == 200:
            next(chunks)  # admitted and following
        else:
            response.read()
        yield response


def _resume(url: str, tenant: dict[str, str], completion_id: str) -> httpx.Response:
    with _reading(url, tenant, completion_id) as response:
        return response


def test_a_tenant_reads_no_more_resumed_streams_than_its_plan_streams(
    api: str, operator_key: str
) -> None:
    tenant = _tenant(api, operator_key)  # the free plan: 2 concurrent streams
    with (
        _reading(api, tenant, _planted(tenant["id"])),
        _reading(api, tenant, _planted(tenant["id"])),
    ):
        third = _resume(api, tenant, _planted(tenant["id"]))
        assert third.status_code == 429
        assert "concurrent_streams" in third.json()["error"]["message"]
        assert third.headers["retry-after"]
        other = _tenant(api, operator_key)
        assert _resume(api, other, _planted(other["id"])).status_code == 200


def test_a_closed_reader_frees_its_place_for_the_next(api: str, operator_key: str) -> None:
    tenant = _tenant(api, operator_key)
    stream = _planted(tenant["id"])
    for _ in range(4):  # twice the plan's streams, one after another
        deadline = time.monotonic() + 5
        while (status := _resume(api, tenant, stream).status_code) == 429:
            assert time.monotonic() < deadline, "a closed reader kept its place"
            time.sleep(0.2)
        assert status == 200


def test_past_the_process_cap_a_reader_gets_503_and_admission_still_answers(
    api: str, operator_key: str
) -> None:
    tenants = [_tenant(api, operator_key, plan="pro") for _ in range(2)]
    with contextlib.ExitStack() as open_readers:
        for i in range(MAX_READERS):
            tenant = tenants[i % 2]
            open_readers.enter_context(_reading(api, tenant, _planted(tenant["id"])))
        refused = _resume(api, tenants[0], _planted(tenants[0]["id"]))
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "too_many_readers"
        assert refused.headers["retry-after"] == "1"
        # Inference is still admitted: its answer is about the model, not Redis.
        answer = httpx.post(
            f"{api}/v1/chat/completions",
            json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": tenants[1]["Authorization"]},
            timeout=10,
        )
        assert answer.status_code == 404


def test_a_resume_of_another_tenants_stream_is_a_404(api: str, operator_key: str) -> None:
    owner, stranger = _tenant(api, operator_key), _tenant(api, operator_key)
    assert _resume(api, stranger, _planted(owner["id"])).status_code == 404


async def test_a_full_redis_pool_refuses_within_its_wait_instead_of_hanging() -> None:
    client = connect_redis(REDIS_URL, connect_timeout_s=0.3, max_connections=1)
    blocker = asyncio.create_task(client.blpop([f"nothing-{uuid.uuid4().hex}"], timeout=3))
    await asyncio.sleep(0.1)  # the pool's one connection now waits in BLPOP
    started = time.monotonic()
    try:
        with pytest.raises(Exception, match="No connection available"):
            await client.ping()
        assert time.monotonic() - started < 1.5
    finally:
        blocker.cancel()
        with contextlib.suppress(BaseException):
            await blocker
        await client.aclose()
