"""Usage recorded by the gateway's recorder is read back through the usage API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from loraplex.control.usage.schemas import GroupBy
from loraplex.control.usage.service import UsageService
from loraplex.db import migrate
from loraplex.db.config import sqlalchemy_config
from loraplex.gateway.usage import SqlUsageWriter, UsageRecorder
from loraplex.settings import Settings
from tests.conftest import Api, TenantHandle

DAY = {"start": "2026-03-01T00:00:00Z", "end": "2026-03-02T00:00:00Z"}


def at(hour: int, minute: int) -> float:
    """Epoch seconds on 2026-03-01, UTC."""
    return datetime(2026, 3, 1, hour, minute, 30, tzinfo=UTC).timestamp()


class Clock:
    """Epoch seconds the test sets by hand."""

    now = at(0, 0)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def recorder(settings: Settings, clock: Clock) -> AsyncIterator[UsageRecorder]:
    """A recorder writing to the test database, as the gateway's would."""
    config = sqlalchemy_config(settings)
    yield UsageRecorder(SqlUsageWriter(config.create_session_maker()), clock=clock)
    await config.get_engine().dispose()


@pytest.fixture
def record(recorder: UsageRecorder, clock: Clock) -> Callable[..., None]:
    """Record one request at a given hour and minute of 2026-03-01."""

    def record_at(tenant: TenantHandle, hour: int, minute: int, **kw: Any) -> None:
        clock.now = at(hour, minute)
        recorder.record(
            UUID(tenant.id),
            kw.pop("version", None),
            kw.pop("model", "tiny-base"),
            kw.pop("prompt", 10),
            kw.pop("completion", 5),
            **kw,
        )

    return record_at


async def report(api: Api, path: str, **params: str) -> dict[str, Any]:
    response = await api.get(path, params={**DAY, **params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_hourly_buckets_sum_the_minutes_of_each_hour(
    make_tenant: Any, recorder: UsageRecorder, record: Callable[..., None]
) -> None:
    tenant = await make_tenant()
    record(tenant, 10, 5)
    record(tenant, 10, 40, error=True)
    record(tenant, 11, 10, cut=True, completion=2)
    await recorder.flush()

    body = await report(tenant.api, f"/api/v1/tenants/{tenant.id}/usage", group_by="hour")

    rows = [(b["time"], b["requests"], b["errors"], b["cut_streams"]) for b in body["buckets"]]
    assert rows == [("2026-03-01T10:00:00Z", 2, 1, 0), ("2026-03-01T11:00:00Z", 1, 0, 1)]
    assert body["totals"]["total_tokens"] == 3 * 10 + 5 + 5 + 2


async def test_daily_buckets_sum_the_whole_day(
    make_tenant: Any, recorder: UsageRecorder, record: Callable[..., None]
) -> None:
    tenant = await make_tenant()
    for hour in (0, 9, 23):
        record(tenant, hour, 59)
    await recorder.flush()

    body = await report(tenant.api, f"/api/v1/tenants/{tenant.id}/usage", group_by="day")

    assert [(b["time"], b["requests"]) for b in body["buckets"]] == [("2026-03-01T00:00:00Z", 3)]


async def test_later_flushes_add_to_the_same_minute(
    make_tenant: Any, recorder: UsageRecorder, record: Callable[..., None]
) -> None:
    tenant = await make_tenant()
    record(tenant, 8, 0)
    await recorder.flush()
    record(tenant, 8, 0, prompt=1, completion=1)
    await recorder.flush()

    body = await report(tenant.api, f"/api/v1/tenants/{tenant.id}/usage", group_by="minute")

    [bucket] = body["buckets"]
    assert (bucket["requests"], bucket["prompt_tokens"], bucket["adapter_version_id"]) == (
        2,
        11,
        None,
    )


async def test_models_and_versions_are_reported_apart_and_filterable(
    make_tenant: Any, recorder: UsageRecorder, record: Callable[..., None]
) -> None:
    tenant, version = await make_tenant(), uuid4()
    record(tenant, 12, 0, model="support-bot", version=version)
    record(tenant, 12, 1, model="tiny-base")
    await recorder.flush()
    path = f"/api/v1/tenants/{tenant.id}/usage"

    everything = await report(tenant.api, path)
    only_bot = await report(tenant.api, path, model="support-bot")

    assert {(b["model"], b["adapter_version_id"]) for b in everything["buckets"]} == {
        ("support-bot", str(version)),
        ("tiny-base", None),
    }
    assert [b["model"] for b in only_bot["buckets"]] == ["support-bot"]


async def test_the_default_window_is_the_last_day(make_tenant: Any, settings: Settings) -> None:
    tenant = await make_tenant()
    config = sqlalchemy_config(settings)
    live = UsageRecorder(SqlUsageWriter(config.create_session_maker()))
    live.record(UUID(tenant.id), None, "tiny-base", 1, 1)
    await live.stop()
    await config.get_engine().dispose()

    response = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/usage")

    assert response.json()["totals"]["requests"] == 1


async def test_another_tenants_usage_is_not_found(
    make_tenant: Any, recorder: UsageRecorder, record: Callable[..., None]
) -> None:
    owner, other = await make_tenant(), await make_tenant()
    record(owner, 10, 0)
    await recorder.flush()

    response = await other.api.get(f"/api/v1/tenants/{owner.id}/usage", params=DAY)

    assert response.status_code == 404


async def test_operator_reads_across_tenants_and_filters_by_tenant(
    operator: Api, make_tenant: Any, recorder: UsageRecorder, record: Callable[..., None]
) -> None:
    a, b = await make_tenant(), await make_tenant()
    record(a, 14, 0)
    record(b, 14, 0)
    await recorder.flush()

    everyone = await report(operator, "/api/v1/usage")
    only_a = await report(operator, "/api/v1/usage", tenant_id=a.id)

    assert {a.id, b.id} <= {bucket["tenant_id"] for bucket in everyone["buckets"]}
    assert {bucket["tenant_id"] for bucket in only_a["buckets"]} == {a.id}


async def test_a_tenant_key_cannot_read_every_tenants_usage(make_tenant: Any) -> None:
    tenant = await make_tenant()
    response = await tenant.api.get("/api/v1/usage", params=DAY)
    assert response.status_code == 403


@pytest.mark.parametrize(
    "params",
    [
        {"start": "2026-03-02T00:00:00Z", "end": "2026-03-01T00:00:00Z"},  # end before start
        {"start": "2026-03-01T00:00:00Z", "end": "2026-03-01T00:00:00Z"},  # empty range
        {"start": "2026-01-01T00:00:00Z", "end": "2026-03-01T00:00:00Z"},  # over 31 days
        {"start": "yesterday"},
        {**DAY, "group_by": "week"},
    ],
    ids=["reversed", "empty", "too-long", "not-a-datetime", "unknown-group-by"],
)
async def test_bad_ranges_and_options_are_a_400(make_tenant: Any, params: dict[str, str]) -> None:
    tenant = await make_tenant()
    response = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/usage", params=params)
    assert response.status_code == 400, response.text


async def test_sqlite_aggregates_base_model_rows_and_buckets_by_day(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'usage.db'}"
    await asyncio.to_thread(migrate.upgrade, url)
    config = sqlalchemy_config(Settings(database_url=url))
    clock, tenant = Clock(), uuid4()
    recorder = UsageRecorder(SqlUsageWriter(config.create_session_maker()), clock=clock)
    for hour in (1, 1, 22):
        clock.now = at(hour, 0)
        recorder.record(tenant, None, "tiny-base", 10, 5)
        await recorder.flush()

    async with config.get_session() as session:
        usage = UsageService(session=session)
        by_hour = await usage.report(*_day(), GroupBy.HOUR, tenant_id=tenant)
        by_day = await usage.report(*_day(), GroupBy.DAY, tenant_id=tenant)
    await config.get_engine().dispose()

    assert [(b.time.hour, b.requests) for b in by_hour.buckets] == [(1, 2), (22, 1)]
    assert [(b.time, b.total_tokens) for b in by_day.buckets] == [
        (datetime(2026, 3, 1, tzinfo=UTC), 45)
    ]


def _day() -> tuple[datetime, datetime]:
    return datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)
