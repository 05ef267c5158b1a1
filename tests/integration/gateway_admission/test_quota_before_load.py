"""A request that would be shed for load is told first about its own quota: a tenant over
its limit gets 429 with its Retry-After (waiting for the engines would not help it), one
within it gets 503; asking charges nothing. On the real Redis and the embedded stand-in."""

from __future__ import annotations

import uuid

import pytest

from loraplex.control.quotas import Quotas
from loraplex.gateway.admission import Overloaded, OverloadShedder, RateLimited, TenantQuotas
from loraplex.gateway.admission.handle import AdmissionHandle
from loraplex.gateway.admission.places import PlaceBook
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.serving.registry import EngineRegistry
from tests.integration.gateway_admission.conftest import Backend, FakeClock
from tests.support.fake_driver import fake_engine

TARGET = Target(model="tiny", base_model="tiny", max_context=4096, base_source="/nowhere")
ONE_A_MINUTE = Quotas(requests_per_minute=1, priority=1)


async def test_over_its_quota_a_tenant_shed_for_load_is_told_429_not_503(
    backend: Backend, prefix: str, redis_client: object, clock: FakeClock
) -> None:
    quotas = backend.admission(
        key_prefix=prefix, clock=clock, overload=OverloadShedder(budget_s=1.0)
    )
    ask = dict(stream=False, estimated_tokens=1, estimated_ttft_s=3.0)  # past the budget
    try:
        await quotas.admit("heavy", ONE_A_MINUTE, request_id="a", stream=False, estimated_tokens=1)
        with pytest.raises(RateLimited) as over:
            await quotas.admit("heavy", ONE_A_MINUTE, request_id="b", **ask)  # type: ignore[arg-type]
        with pytest.raises(Overloaded) as busy:
            await quotas.admit("light", Quotas(priority=0), request_id="c", **ask)  # type: ignore[arg-type]
    finally:
        await quotas.aclose()
    assert over.value.status_code == 429 and over.value.headers["Retry-After"] == "60"
    assert busy.value.status_code == 503


async def test_asking_whether_a_request_fits_charges_nothing(admission: TenantQuotas) -> None:
    for _ in range(3):
        await admission.refuse_if_over_quota("t1", ONE_A_MINUTE, stream=False, estimated_tokens=1)
    await admission.admit("t1", ONE_A_MINUTE, request_id="a", stream=False, estimated_tokens=1)


async def test_at_a_full_engine_cap_the_tenant_over_its_quota_gets_429(
    backend: Backend, prefix: str, redis_client: object, clock: FakeClock
) -> None:
    quotas = backend.admission(key_prefix=prefix, clock=clock)
    gate = _gate_with_cap_of_one(quotas)
    heavy, light = uuid.uuid4(), uuid.uuid4()
    args = dict(stream=False, target=TARGET, prompt_tokens=1, max_tokens=1)
    try:
        running = await gate.admit(heavy, ONE_A_MINUTE, "r1", **args)  # type: ignore[arg-type]
        with pytest.raises(RateLimited):  # its minute's request is the one running
            await gate.admit(heavy, ONE_A_MINUTE, "r2", **args)  # type: ignore[arg-type]
        with pytest.raises(Overloaded):  # within its quota: the engine is what is full
            await gate.admit(light, Quotas(priority=1), "r3", **args)  # type: ignore[arg-type]
        await _end(running)
    finally:
        await quotas.aclose()


def _gate_with_cap_of_one(quotas: TenantQuotas) -> EngineGate:
    registry = EngineRegistry()
    registry.add(fake_engine(gpu_slots=1, host_slots=1))
    return EngineGate(quotas, None, EngineRouter(registry, cache=None), PlaceBook(fixed=1))


async def _end(running: AdmissionHandle) -> None:
    async with running:
        pass
