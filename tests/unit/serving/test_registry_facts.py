"""An engine that was silent at registration, or comes back from a restart, is asked what it
was started with before it takes requests; one that contradicts its registration stays out,
with the reason logged and shown."""

from __future__ import annotations

import logging

import pytest

from loraplex.serving.engines.reported_facts import ReportedFacts
from loraplex.serving.health import HealthRule
from loraplex.serving.registry import EngineHandle, EngineRegistry, EngineSource
from tests.support.fake_driver import FakeDriver

ENGINE_ID = "0190a1b2-0000-7000-8000-000000000002"
SERVES_TINY = ReportedFacts(kind="vllm", served_models=("tiny",), gpu_slots=2)


class CountingDriver(FakeDriver):
    """A fake engine that counts how often it was asked for its facts."""

    def __init__(self) -> None:
        super().__init__("vllm", "http://engine")
        self.asked = 0
        self.reported = SERVES_TINY

    async def reported_facts(self) -> ReportedFacts:
        """`reported`, counted."""
        self.asked += 1
        return await super().reported_facts()


def handle_of(driver: FakeDriver, *, source: EngineSource = EngineSource.DATABASE) -> EngineHandle:
    """An engine registered for base model "tiny" with 2 GPU slots."""
    return EngineHandle(
        id=ENGINE_ID, name="e1", url=driver.url, kind="vllm", base_model="tiny",
        max_lora_rank=16, gpu_slots=2, host_slots=4, driver=driver, source=source,
    )  # fmt: skip


async def test_an_engine_silent_at_registration_serving_another_model_stays_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = CountingDriver()
    driver.up = False  # registered while down: taken on its word
    registry = EngineRegistry()
    handle = handle_of(driver)
    registry.add(handle)
    await registry.poll_once()
    driver.up = True
    driver.reported = ReportedFacts(kind="vllm", served_models=("llama-3.1-8b",))
    with caplog.at_level(logging.WARNING, logger="loraplex.serving.poller"):
        for _ in range(3):
            await registry.poll_once()
    assert registry.candidates("tiny") == []
    assert "base_model is 'tiny', but the engine at this url serves 'llama-3.1-8b'" in (
        handle.last_error
    )
    logged = [r.getMessage() for r in caplog.records if "kept out of rotation" in r.getMessage()]
    assert len(logged) == 1, logged  # once, not every round
    assert "e1" in logged[0] and "base_model" in logged[0]


async def test_once_the_engine_is_restarted_as_registered_it_joins_rotation() -> None:
    driver = CountingDriver()
    driver.reported = ReportedFacts(kind="vllm", gpu_slots=4)  # --max-loras 4, registered 2
    registry = EngineRegistry()
    handle = handle_of(driver)
    registry.add(handle)
    await registry.poll_once()
    assert registry.candidates("tiny") == [] and "--max-loras 4" in handle.last_error
    driver.reported = SERVES_TINY
    await registry.poll_once()
    assert registry.candidates("tiny") == [handle]
    assert (handle.last_error, handle.facts_mismatch) == ("", "")


async def test_a_confirmed_engine_is_not_asked_again_each_round() -> None:
    driver = CountingDriver()
    registry = EngineRegistry()
    registry.add(handle_of(driver))
    for _ in range(4):
        await registry.poll_once()
    assert driver.asked == 1
    assert len(registry.candidates("tiny")) == 1


async def test_an_engine_back_from_a_restart_with_other_flags_is_taken_out() -> None:
    driver = CountingDriver()
    registry = EngineRegistry(rule=HealthRule(failures_to_unhealthy=1))
    handle = handle_of(driver)
    registry.add(handle)
    await registry.poll_once()
    assert registry.candidates("tiny") == [handle]
    driver.up = False  # it stops ...
    await registry.poll_once()
    driver.up = True  # ... and comes back started on another model
    driver.reported = ReportedFacts(kind="vllm", served_models=("other",))
    await registry.poll_once()
    assert registry.candidates("tiny") == []
    assert "serves 'other'" in handle.last_error
    assert driver.asked == 2  # once at first, once on its way back


async def test_a_changed_registration_the_engine_contradicts_leaves_rotation_at_once() -> None:
    driver = CountingDriver()
    registry = EngineRegistry(rule=HealthRule(failures_to_unhealthy=3))
    handle = handle_of(driver)
    registry.add(handle)
    await registry.poll_once()
    handle.gpu_slots = 8  # what `adopt` does when the row changes
    await registry.poll_once()  # one round, not three
    assert registry.candidates("tiny") == []
    assert "gpu_slots is 8" in handle.last_error


async def test_an_engine_from_settings_is_not_held_to_its_base_models_name() -> None:
    driver = CountingDriver()
    driver.reported = ReportedFacts(kind="vllm", served_models=("loraplex-tiny",), gpu_slots=2)
    registry = EngineRegistry()
    registry.add(handle_of(driver, source=EngineSource.SETTINGS))
    await registry.poll_once()
    assert len(registry.candidates("tiny")) == 1


async def test_a_base_model_registered_from_the_folder_the_engine_serves_matches() -> None:
    driver = CountingDriver()
    driver.reported = ReportedFacts(kind="vllm", served_models=("loraplex-tiny",))
    registry = EngineRegistry()
    handle = handle_of(driver)
    handle.base_source = "/repo/var/models/loraplex-tiny"  # "tiny" names that folder's model
    registry.add(handle)
    await registry.poll_once()
    assert registry.candidates("tiny") == [handle]
