"""The per-rank-class demand series move as a client sees its requests: held at the gate,
admitted, shed, slow to a first token. Each test uses rank classes of its own, since the
series live on the process's default registry."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from prometheus_client import REGISTRY, generate_latest

from loraplex.control.quotas import Quotas
from loraplex.gateway.admission.demand import NO_CLASS, rank_class_of
from loraplex.gateway.admission.errors import Overloaded
from loraplex.gateway.admission.handle import AdmissionHandle
from loraplex.gateway.admission.places import PlaceBook
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.serving.registry import EngineHandle, EngineRegistry
from tests.support.fake_driver import FakeDriver

BASE = Target(model="tiny", base_model="tiny", max_context=4096, base_source="/nowhere")


def _engine(rank: int, name: str | None = None, base_model: str = "tiny") -> EngineHandle:
    name = name or f"r{rank}"
    return EngineHandle(
        id=name, name=name, url="u", kind="vllm", base_model=base_model, max_lora_rank=rank,
        gpu_slots=4, host_slots=8, driver=FakeDriver(), healthy=True,
    )  # fmt: skip


def _gate(*ranks: int, cap: int = 1, queue_wait_s: float = 0.005) -> EngineGate:
    registry = EngineRegistry()
    for rank in ranks:
        registry.add(_engine(rank))
    router = EngineRouter(registry, cache=None)
    return EngineGate(None, None, router, PlaceBook(fixed=cap), busy_wait_s=queue_wait_s)


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


TENANT = uuid.uuid4()


async def _admit(gate: EngineGate, request_id: str, target: Target = BASE) -> AdmissionHandle:
    return await gate.admit(
        TENANT, Quotas(priority=1), request_id,
        stream=True, target=target, prompt_tokens=1, max_tokens=1,
    )  # fmt: skip


async def _end(handle: AdmissionHandle) -> None:
    """What the gateway does when a request ends: give its place back, then its timings."""
    async with handle:
        pass
    handle.finished("r11", 0.01, 1, 0.01)


def test_a_request_is_labelled_with_the_smallest_class_that_fits_its_adapter() -> None:
    engines = [_engine(64), _engine(16), _engine(8, base_model="other")]
    by_rank = {
        rank: rank_class_of(engines, Target("a", "tiny", 4096, "/x", rank=rank))
        for rank in (None, 8, 16, 32, 64, 128)
    }
    assert by_rank == {None: "16", 8: "16", 16: "16", 32: "64", 64: "64", 128: NO_CLASS}


def test_a_registered_class_reads_zero_before_any_request() -> None:
    _gate(12)
    text = generate_latest(REGISTRY).decode()
    assert 'loraplex_rank_class_in_flight{rank_class="12"} 0.0' in text
    assert 'loraplex_rank_class_waiting{rank_class="12"} 0.0' in text
    assert 'loraplex_rank_class_shed_total{rank_class="12",reason="engine_busy"} 0.0' in text


def test_a_request_held_at_the_gate_shows_as_waiting_until_it_is_let_in() -> None:
    gate = _gate(11, cap=1, queue_wait_s=30.0)

    async def scenario() -> None:
        first = await _admit(gate, "first")
        assert _value("loraplex_rank_class_in_flight", rank_class="11") == 1
        second = asyncio.create_task(_admit(gate, "second"))
        while _value("loraplex_rank_class_waiting", rank_class="11") == 0:
            assert not second.done()
            await asyncio.sleep(0)
        assert _value("loraplex_rank_class_in_flight", rank_class="11") == 1  # not yet in
        await _end(first)
        admitted = await second
        assert _value("loraplex_rank_class_waiting", rank_class="11") == 0
        assert _value("loraplex_rank_class_in_flight", rank_class="11") == 1  # the second
        await _end(admitted)
        assert _value("loraplex_rank_class_in_flight", rank_class="11") == 0

    asyncio.run(scenario())
    assert _value("loraplex_rank_class_admitted_total", rank_class="11") == 2


def test_a_shed_request_counts_once_under_its_class_and_reason() -> None:
    gate = _gate(13, cap=1)

    async def scenario() -> None:
        await _admit(gate, "first")
        with pytest.raises(Overloaded):
            await _admit(gate, "second")

    asyncio.run(scenario())
    shed = _value("loraplex_rank_class_shed_total", rank_class="13", reason="waited_too_long")
    assert shed == 1  # it waited for the one place, then was shed
    assert _value("loraplex_rank_class_waiting", rank_class="13") == 0
    assert _value("loraplex_rank_class_in_flight", rank_class="13") == 1  # only the first


def test_a_first_token_over_its_target_counts_as_a_miss() -> None:
    gate = _gate(14, cap=0)
    gate.ttft_slo_s = 0.5

    async def scenario() -> None:
        fast, slow = await _admit(gate, "fast"), await _admit(gate, "slow")
        fast.first_token("r14", 0.1)
        slow.first_token("r14", 2.0)

    asyncio.run(scenario())
    assert _value("loraplex_rank_class_ttft_seconds_count", rank_class="14") == 2
    assert _value("loraplex_rank_class_ttft_over_target_total", rank_class="14") == 1


class _SheddingQuotas:
    """Quotas whose TTFT estimate sheds every request it is asked to admit."""

    async def admit(self, *args: object, **kwargs: object) -> str:
        raise Overloaded("1")  # reason "overload", as the estimate's shedding raises it

    async def refuse_if_over_quota(self, *args: object, **kwargs: object) -> None:
        return None


def test_a_request_shed_by_the_ttft_estimate_counts_as_shed_not_admitted() -> None:
    gate = _gate(15, cap=0)
    gate.quotas = _SheddingQuotas()  # type: ignore[assignment]

    async def scenario() -> None:
        with pytest.raises(Overloaded):
            await _admit(gate, "estimated-too-slow")

    asyncio.run(scenario())
    assert _value("loraplex_rank_class_shed_total", rank_class="15", reason="overload") == 1
    assert _value("loraplex_rank_class_admitted_total", rank_class="15") == 0
    assert _value("loraplex_rank_class_in_flight", rank_class="15") == 0
