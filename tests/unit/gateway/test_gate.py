"""The in-flight cap sheds the lowest priority first and never refuses an idle engine."""

from __future__ import annotations

import uuid

import pytest

from loraplex.gateway.admission.errors import Overloaded
from loraplex.gateway.gate import AdmissionGate, in_flight_allowance
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.serving.registry import EngineHandle, EngineRegistry
from tests.support.fake_driver import FakeDriver

TARGET = Target(model="tiny", base_model="tiny", max_context=4096, base_source="/nowhere")


def _gate(in_flight: int, cap: int) -> AdmissionGate:
    registry = EngineRegistry()
    registry.add(
        EngineHandle(
            id="e",
            name="e",
            url="u",
            kind="vllm",
            base_model="tiny",
            max_lora_rank=64,
            gpu_slots=4,
            host_slots=8,
            driver=FakeDriver(),
            healthy=True,
            in_flight=in_flight,
        )
    )
    return AdmissionGate(
        None,
        None,
        EngineRouter(registry, cache=None),
        parallelism=1,  # type: ignore[arg-type]
        max_in_flight=cap,
    )


def test_lower_priorities_get_a_smaller_share_of_the_cap() -> None:
    assert [in_flight_allowance(10, p) for p in (0, 1, 2, 7)] == [8, 10, 12, 12]
    assert in_flight_allowance(1, 0) == 1


@pytest.mark.parametrize(
    "in_flight, priority, shed",
    [(7, 0, False), (8, 0, True), (9, 1, False), (10, 1, True), (11, 2, False)],
)
def test_a_saturated_engine_sheds_by_priority(in_flight: int, priority: int, shed: bool) -> None:
    gate = _gate(in_flight, cap=10)
    if shed:
        with pytest.raises(Overloaded):
            gate.shed_if_saturated(TARGET, priority, uuid.uuid4())
    else:
        gate.shed_if_saturated(TARGET, priority, uuid.uuid4())


def test_no_cap_never_sheds() -> None:
    _gate(1000, cap=0).shed_if_saturated(TARGET, 0, uuid.uuid4())
