"""Engines leave rotation when they stop answering and come back when they answer again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loraplex.db.models import EngineStatus
from loraplex.serving.engines import EngineDriver
from loraplex.serving.health import (
    HealthRule,
    HealthTracker,
    HeartbeatSchedule,
    Transition,
)
from loraplex.serving.registry import (
    EngineHandle,
    EngineRegistry,
    EngineSource,
    settings_engine_id,
)
from loraplex.settings import EngineEndpoint, Settings
from tests.support.fake_driver import FakeDriver

ENGINE_ID = "0190a1b2-0000-7000-8000-000000000001"

# --- the pure rule ---------------------------------------------------------------------------


def test_first_success_puts_an_unknown_engine_in_rotation() -> None:
    tracker = HealthTracker()
    assert tracker.observe(True) is Transition.UP
    assert tracker.healthy


def test_first_failure_keeps_an_unknown_engine_out() -> None:
    tracker = HealthTracker()
    assert tracker.observe(False) is Transition.DOWN
    assert not tracker.healthy


def test_one_failure_of_a_healthy_engine_keeps_it_in_rotation() -> None:
    tracker = HealthTracker(HealthRule(failures_to_unhealthy=2))
    tracker.observe(True)
    assert tracker.observe(False) is None
    assert tracker.healthy


def test_consecutive_failures_take_a_healthy_engine_out() -> None:
    tracker = HealthTracker(HealthRule(failures_to_unhealthy=3))
    tracker.observe(True)
    outcomes = [tracker.observe(False) for _ in range(3)]
    assert outcomes == [None, None, Transition.DOWN]
    assert not tracker.healthy


def test_a_success_between_failures_restarts_the_count() -> None:
    tracker = HealthTracker(HealthRule(failures_to_unhealthy=2))
    tracker.observe(True)
    for ok in (False, True, False, True, False):
        tracker.observe(ok)
    assert tracker.healthy


def test_one_success_brings_an_unhealthy_engine_back() -> None:
    tracker = HealthTracker(HealthRule(failures_to_unhealthy=1))
    tracker.observe(True)
    tracker.observe(False)
    assert tracker.observe(True) is Transition.UP


def test_forcing_down_takes_a_healthy_engine_out_at_once() -> None:
    tracker = HealthTracker(HealthRule(failures_to_unhealthy=5))
    tracker.observe(True)
    assert tracker.force_down() is Transition.DOWN
    assert tracker.force_down() is None  # already out: nothing new to record


def test_thresholds_below_one_are_refused() -> None:
    with pytest.raises(ValueError):
        HealthRule(failures_to_unhealthy=0)


def test_heartbeat_is_due_at_most_once_per_interval() -> None:
    schedule = HeartbeatSchedule(every_s=30)
    assert schedule.due("e", now=100)
    schedule.written("e", now=100)
    assert not schedule.due("e", now=129)
    assert schedule.due("e", now=130)


# --- the registry with in-memory engines ------------------------------------------------------


def make_handle(
    driver: FakeDriver, *, engine_id: str = ENGINE_ID, name: str = "e1", base: str = "tiny"
) -> EngineHandle:
    """A database-registered engine handle around a fake driver."""
    return EngineHandle(
        id=engine_id,
        name=name,
        url=driver.url,
        kind=driver.kind,
        base_model=base,
        max_lora_rank=16,
        gpu_slots=2,
        host_slots=4,
        driver=driver,
    )


def test_the_fake_driver_speaks_the_engine_protocol() -> None:
    assert isinstance(FakeDriver(), EngineDriver)


async def test_candidates_are_the_healthy_engines_of_the_base_model() -> None:
    registry = EngineRegistry()
    up, down, other = FakeDriver(), FakeDriver(), FakeDriver()
    down.up = False
    registry.add(make_handle(up, engine_id="a", name="up"))
    registry.add(make_handle(down, engine_id="b", name="down"))
    registry.add(make_handle(other, engine_id="c", name="other", base="big"))
    await registry.poll_once()
    assert [h.name for h in registry.candidates("tiny")] == ["up"]


async def test_an_engine_is_no_candidate_before_its_first_probe() -> None:
    registry = EngineRegistry()
    registry.add(make_handle(FakeDriver()))
    assert registry.candidates("tiny") == []


async def test_an_engine_that_stops_answering_leaves_rotation_and_comes_back() -> None:
    driver = FakeDriver()
    registry = EngineRegistry(rule=HealthRule(failures_to_unhealthy=2))
    registry.add(make_handle(driver))
    await registry.poll_once()
    driver.up = False
    await registry.poll_once()
    assert len(registry.candidates("tiny")) == 1  # one miss is forgiven
    await registry.poll_once()
    assert registry.candidates("tiny") == []
    assert "connection refused" in registry.all()[0].last_error
    driver.up = True
    await registry.poll_once()
    assert len(registry.candidates("tiny")) == 1
    assert registry.all()[0].last_error == ""


async def test_an_engine_that_hangs_is_taken_out() -> None:
    driver = FakeDriver()
    driver.hang = True
    registry = EngineRegistry(probe_timeout_s=0.01)
    registry.add(make_handle(driver))
    await registry.poll_once()
    assert registry.candidates("tiny") == []
    assert "no answer" in registry.all()[0].last_error


async def test_a_restarted_engine_is_seen_to_have_lost_its_adapters() -> None:
    driver = FakeDriver()
    registry = EngineRegistry()
    handle = make_handle(driver)
    registry.add(handle)
    driver.adapters["lpx-a"] = driver.adapters["lpx-b"] = None  # type: ignore[assignment]
    await registry.poll_once()
    assert handle.loaded == {"lpx-a", "lpx-b"}
    driver.restart()
    await registry.poll_once()
    assert handle.loaded == set()


async def test_a_load_finishing_during_a_poll_stays_known() -> None:
    driver = FakeDriver()
    driver.list_gate = asyncio.Event()
    registry = EngineRegistry()
    handle = make_handle(driver)
    registry.add(handle)
    poll = asyncio.create_task(registry.poll_once())
    await driver.list_started.wait()  # the poll is now waiting on the engine's answer
    handle.loaded.add("lpx-new")  # what the loader does after a successful load
    driver.list_gate.set()
    await poll
    assert "lpx-new" in handle.loaded


async def test_an_unload_finishing_during_a_poll_stays_unloaded() -> None:
    driver = FakeDriver()
    driver.adapters["lpx-old"] = Path("/nowhere")
    driver.list_gate = asyncio.Event()
    registry = EngineRegistry()
    handle = make_handle(driver)
    handle.loaded.add("lpx-old")
    registry.add(handle)
    poll = asyncio.create_task(registry.poll_once())
    await driver.list_started.wait()  # the engine's answer still lists lpx-old
    handle.loaded.discard("lpx-old")  # what placement does after a successful unload
    driver.list_gate.set()
    await poll
    assert "lpx-old" not in handle.loaded


async def test_a_request_failure_takes_the_engine_out_until_a_probe_answers() -> None:
    registry = EngineRegistry(rule=HealthRule(failures_to_unhealthy=3))
    registry.add(make_handle(FakeDriver()))
    await registry.poll_once()
    await registry.mark_unhealthy(ENGINE_ID, "died mid-stream")
    assert registry.candidates("tiny") == []
    await registry.poll_once()
    assert len(registry.candidates("tiny")) == 1


async def test_start_probes_before_returning_and_stop_closes_drivers() -> None:
    driver = FakeDriver()
    registry = EngineRegistry(interval_s=3600)
    registry.add(make_handle(driver))
    await registry.start()
    try:
        assert len(registry.candidates("tiny")) == 1
    finally:
        await registry.stop()
    assert driver.closed


async def test_an_engine_added_while_running_is_probed_without_waiting_a_round() -> None:
    registry = EngineRegistry(interval_s=3600)
    await registry.start()
    try:
        registry.add(make_handle(FakeDriver()))
        for _ in range(10):  # the probe runs as a task; let it finish
            await asyncio.sleep(0)
        assert len(registry.candidates("tiny")) == 1
    finally:
        await registry.stop()


async def test_retiring_an_engine_removes_it_and_closes_its_driver() -> None:
    driver = FakeDriver()
    registry = EngineRegistry()
    registry.add(make_handle(driver))
    await registry.retire(ENGINE_ID)
    assert registry.get(ENGINE_ID) is None
    assert driver.closed


def test_engines_from_settings_get_stable_ids_and_their_declared_facts() -> None:
    made: list[tuple[str, str]] = []

    def factory(kind: str, url: str) -> FakeDriver:
        made.append((kind, url))
        return FakeDriver(kind, url)

    settings = Settings(
        engines=(EngineEndpoint(name="gpu0", url="http://g0:30000", kind="sglang", base_model="m"),)
    )
    registry = EngineRegistry.from_settings(settings, driver_factory=factory)
    (handle,) = registry.all()
    assert handle.id == settings_engine_id("gpu0")
    assert (handle.kind, handle.base_model, handle.source) == ("sglang", "m", EngineSource.SETTINGS)
    assert made == [("sglang", "http://g0:30000")]
    assert registry.interval_s == settings.engine_health_interval_s


# --- what the poller writes to the engines table ----------------------------------------------


class RecordingSessions:
    """A session factory that records the UPDATE statements the poller would run."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []

    def __call__(self) -> RecordingSessions:
        return self

    async def __aenter__(self) -> RecordingSessions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def execute(self, statement: Any) -> None:
        self.writes.append(statement.compile().params)

    async def commit(self) -> None:
        return None


async def test_state_changes_are_written_and_heartbeats_throttled() -> None:
    sessions = RecordingSessions()
    driver = FakeDriver()
    registry = EngineRegistry(
        session_factory=sessions,
        rule=HealthRule(failures_to_unhealthy=1),
        heartbeat_every_s=30,
        clock=lambda: 0.0,  # time stands still: no second heartbeat falls due
    )
    registry.add(make_handle(driver))
    for _ in range(3):
        await registry.poll_once()
    driver.up = False
    await registry.poll_once()
    await registry.poll_once()
    assert [w["status"] for w in sessions.writes] == [EngineStatus.HEALTHY, EngineStatus.UNHEALTHY]
    assert sessions.writes[0]["last_heartbeat_at"] is not None
    assert "last_heartbeat_at" not in sessions.writes[1]


async def test_engines_from_settings_are_never_written_to_the_database() -> None:
    sessions = RecordingSessions()
    registry = EngineRegistry(session_factory=sessions)
    handle = make_handle(FakeDriver())
    handle.source = EngineSource.SETTINGS
    registry.add(handle)
    await registry.poll_once()
    assert sessions.writes == []
