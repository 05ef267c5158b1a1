"""Engines whose agent reports their health: no health route called here, the report rules,
and a draining engine takes no new requests."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from loraplex.serving.engines import EngineHealth
from loraplex.serving.registry import EngineHandle, EngineRegistry
from tests.support.fake_driver import FakeDriver
from tests.unit.serving.test_registry_health import make_handle


def counting(driver: FakeDriver) -> list[None]:
    """Replace the driver's health route with one that counts its calls."""
    calls: list[None] = []

    async def health() -> EngineHealth:
        calls.append(None)
        return EngineHealth(True, 0.0, "")

    driver.health = health  # type: ignore[method-assign]
    return calls


def row_of(handle: EngineHandle, **state: object) -> SimpleNamespace:
    """An `engines` row as the registry reads it: this handle's facts, an agent's report
    (and its sealed secret)."""
    reported: dict[str, object] = {
        "engine_healthy": True, "draining": False, "agent_secret_sealed": None, **state,
    }  # fmt: skip
    return SimpleNamespace(
        id=handle.id, name=handle.name, url=handle.url, kind=handle.kind,
        max_lora_rank=handle.max_lora_rank, gpu_slots=handle.gpu_slots,
        host_slots=handle.host_slots, agent_url="", agent_seen_at=datetime.now(UTC), **reported,
    )  # fmt: skip


async def test_an_engine_its_agent_reports_on_is_not_health_probed_here() -> None:
    driver = FakeDriver()
    calls = counting(driver)
    registry = EngineRegistry()
    handle = make_handle(driver)
    handle.reported_healthy = True
    registry.add(handle)
    for _ in range(3):
        await registry.poll_once()
    assert calls == []  # the agent is its one prober
    assert [h.name for h in registry.candidates("tiny")] == [handle.name]


async def test_an_operators_engine_is_still_health_probed() -> None:
    driver = FakeDriver()
    calls = counting(driver)
    registry = EngineRegistry()
    registry.add(make_handle(driver))
    await registry.poll_once()
    assert len(calls) == 1


async def test_the_agent_reporting_its_engine_down_takes_it_out_at_once() -> None:
    registry = EngineRegistry()
    handle = make_handle(FakeDriver())
    registry.add(handle)
    await registry.poll_once()
    await registry.adopt(row_of(handle), "tiny")  # type: ignore[arg-type]
    assert registry.candidates("tiny")
    await registry.adopt(row_of(handle, engine_healthy=False), "tiny")  # type: ignore[arg-type]
    assert registry.candidates("tiny") == []
    await registry.poll_once()  # its cheap calls still answer: the report keeps it out
    assert registry.candidates("tiny") == []


async def test_a_host_that_dies_with_its_agent_leaves_rotation_on_the_cheap_probes() -> None:
    driver = FakeDriver()
    registry = EngineRegistry()
    handle = make_handle(driver)
    handle.reported_healthy = True  # the last report before the agent died too
    registry.add(handle)
    await registry.poll_once()
    driver.up = False
    await registry.poll_once()
    await registry.poll_once()
    assert registry.candidates("tiny") == []


async def test_a_draining_engine_takes_no_new_requests_but_stays_registered() -> None:
    registry = EngineRegistry()
    handle = make_handle(FakeDriver())
    registry.add(handle)
    await registry.poll_once()
    await registry.adopt(row_of(handle, draining=True), "tiny")  # type: ignore[arg-type]
    assert registry.candidates("tiny") == []
    assert registry.get(handle.id) is handle and handle.healthy
    await registry.adopt(row_of(handle), "tiny")  # type: ignore[arg-type]
    assert registry.candidates("tiny") == [handle]


async def test_an_operators_engine_gets_its_health_route_only_every_few_rounds() -> None:
    driver = FakeDriver()
    calls = counting(driver)
    now = [0.0]
    registry = EngineRegistry(clock=lambda: now[0], health_route_every_s=10.0)
    registry.add(make_handle(driver))
    for _ in range(5):  # 2 s apart: one call, then the cheap calls alone
        await registry.poll_once()
        now[0] += 2.0
    assert len(calls) == 1
    await registry.poll_once()
    assert len(calls) == 2


async def test_an_operators_engine_that_stops_answering_leaves_between_health_routes() -> None:
    driver = FakeDriver()
    registry = EngineRegistry(clock=lambda: 0.0, health_route_every_s=60.0)
    registry.add(make_handle(driver))
    await registry.poll_once()
    driver.up = False  # its cheap calls fail too
    await registry.poll_once()
    await registry.poll_once()
    assert registry.candidates("tiny") == []


async def test_an_older_read_of_the_table_does_not_undo_a_newer_report() -> None:
    registry = EngineRegistry()
    handle = make_handle(FakeDriver())
    registry.add(handle)
    await registry.poll_once()
    stale = row_of(handle)  # read before the drain's heartbeat committed
    await registry.adopt(row_of(handle, draining=True), "tiny")  # type: ignore[arg-type]
    stale.agent_seen_at = handle.reported_at.replace(year=2000)  # type: ignore[union-attr]
    await registry.adopt(stale, "tiny")  # type: ignore[arg-type]
    assert handle.draining and registry.candidates("tiny") == []
