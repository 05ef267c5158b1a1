"""The usage recorder aggregates per minute in memory and never loses or doubles counts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from loraplex.db.models.usage import BASE_MODEL_VERSION
from loraplex.gateway.usage import UsageRecorder, UsageRow

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()


class FakeClock:
    """Epoch seconds the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeWriter:
    """Keeps every written row; fails while `failing` is set."""

    def __init__(self) -> None:
        self.rows: list[UsageRow] = []
        self.failing = False
        self.attempts = 0

    async def write(self, rows: Sequence[UsageRow], spend: Sequence[object] = ()) -> None:
        self.attempts += 1
        if self.failing:
            raise ConnectionError("database down")
        self.rows.extend(rows)

    def totals(self, field: str) -> int:
        return sum(getattr(row, field) for row in self.rows)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def writer() -> FakeWriter:
    return FakeWriter()


@pytest.fixture
def recorder(writer: FakeWriter, clock: FakeClock) -> UsageRecorder:
    return UsageRecorder(writer, clock=clock)


async def test_requests_in_the_same_minute_become_one_row(
    recorder: UsageRecorder, writer: FakeWriter, clock: FakeClock
) -> None:
    tenant, version = uuid4(), uuid4()
    recorder.record(tenant, version, "support-bot", 10, 5)
    clock.now += 59
    recorder.record(tenant, version, "support-bot", 7, 3, error=True)

    assert await recorder.flush() == 1
    [row] = writer.rows
    assert (row.requests, row.prompt_tokens, row.completion_tokens, row.errors) == (2, 17, 8, 1)
    assert row.minute == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


async def test_a_new_minute_starts_a_new_row(
    recorder: UsageRecorder, writer: FakeWriter, clock: FakeClock
) -> None:
    tenant = uuid4()
    recorder.record(tenant, None, "base", 1, 1)
    clock.now += 60
    recorder.record(tenant, None, "base", 1, 1)

    await recorder.flush()
    assert sorted(row.minute.minute for row in writer.rows) == [0, 1]


async def test_tenants_versions_and_models_are_counted_apart(
    recorder: UsageRecorder, writer: FakeWriter
) -> None:
    a, b, version = uuid4(), uuid4(), uuid4()
    recorder.record(a, version, "bot", 1, 1)
    recorder.record(b, version, "bot", 1, 1)
    recorder.record(a, None, "bot", 1, 1)
    recorder.record(a, version, "bot@v2", 1, 1)

    assert await recorder.flush() == 4


async def test_base_model_requests_use_the_named_sentinel_version(
    recorder: UsageRecorder, writer: FakeWriter
) -> None:
    recorder.record(uuid4(), None, "tiny-base", 3, 4)
    await recorder.flush()
    assert writer.rows[0].adapter_version_id == BASE_MODEL_VERSION


async def test_a_cut_stream_counts_its_generated_tokens(
    recorder: UsageRecorder, writer: FakeWriter
) -> None:
    recorder.record(uuid4(), uuid4(), "bot", 12, 40, cut=True)
    await recorder.flush()
    assert (writer.totals("cut_streams"), writer.totals("completion_tokens")) == (1, 40)


async def test_a_failed_flush_keeps_the_counts_for_the_next_one(
    recorder: UsageRecorder, writer: FakeWriter
) -> None:
    tenant = uuid4()
    recorder.record(tenant, None, "base", 5, 5)
    writer.failing = True
    with pytest.raises(ConnectionError):
        await recorder.flush()

    recorder.record(tenant, None, "base", 1, 2)  # same minute, arrives while the DB is down
    writer.failing = False
    await recorder.flush()

    assert [(r.requests, r.prompt_tokens, r.completion_tokens) for r in writer.rows] == [(2, 6, 7)]


async def test_a_successful_flush_is_not_written_again(
    recorder: UsageRecorder, writer: FakeWriter
) -> None:
    recorder.record(uuid4(), None, "base", 5, 5)
    await recorder.flush()
    assert await recorder.flush() == 0
    assert writer.totals("requests") == 1


async def test_a_cancelled_flush_keeps_the_counts() -> None:
    class HangingWriter:
        async def write(self, rows: Sequence[UsageRow], spend: Sequence[object] = ()) -> None:
            await asyncio.Event().wait()

    hanging = UsageRecorder(HangingWriter())
    hanging.record(uuid4(), None, "base", 1, 1)
    task = asyncio.create_task(hanging.flush())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert hanging.pending_rows == 1


async def test_a_long_model_name_is_cut_to_the_column_width(
    recorder: UsageRecorder, writer: FakeWriter
) -> None:
    recorder.record(uuid4(), None, "m" * 500, 1, 1)
    await recorder.flush()
    assert len(writer.rows[0].model) == 200


async def test_stop_writes_what_is_left_and_ends_run(
    recorder: UsageRecorder, writer: FakeWriter
) -> None:
    runner = asyncio.create_task(recorder.run(interval_s=3600))
    recorder.record(uuid4(), None, "base", 1, 1)
    await recorder.stop()
    await asyncio.wait_for(runner, timeout=5)
    assert writer.totals("requests") == 1


async def test_run_survives_a_failing_flush(recorder: UsageRecorder, writer: FakeWriter) -> None:
    writer.failing = True
    recorder.record(uuid4(), None, "base", 1, 1)
    runner = asyncio.create_task(recorder.run(interval_s=0.001))
    while writer.attempts < 2:  # two failed flushes: the loop went on after the first
        await asyncio.sleep(0.001)
    assert not runner.done()
    writer.failing = False
    await recorder.stop()
    await asyncio.wait_for(runner, timeout=5)
    assert writer.totals("requests") == 1
