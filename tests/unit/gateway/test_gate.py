"""The gate gives each request a place on the engines through the admission core: it never
lets more run than the places, shares them fairly, and sheds with 503 after a wait."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from loraplex.control.quotas import Quotas
from loraplex.gateway.admission.errors import Overloaded, RateLimited
from loraplex.gateway.admission.handle import AdmissionHandle
from loraplex.gateway.admission.places import PlaceBook, places_of_profile
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.serving.registry import EngineRegistry
from tests.support.fake_driver import fake_engine

TARGET = Target(model="tiny", base_model="tiny", max_context=4096, base_source="/nowhere")
PRO = Quotas(priority=1)


def _gate(places: int, *, busy_wait_s: float = 0.005, gpu_slots: int = 4) -> EngineGate:
    registry = EngineRegistry()
    registry.add(fake_engine(gpu_slots=gpu_slots))
    book = PlaceBook(fixed=places, parallelism=1)
    return EngineGate(None, None, EngineRouter(registry, cache=None), book, busy_wait_s=busy_wait_s)


async def _admit(
    gate: EngineGate, tenant: uuid.UUID, name: str, limits: Quotas = PRO
) -> AdmissionHandle:
    return await gate.admit(
        tenant, limits, name, stream=True, target=TARGET, prompt_tokens=1, max_tokens=1
    )


async def _shed(gate: EngineGate, tenant: uuid.UUID, name: str, limits: Quotas = PRO) -> bool:
    try:
        await _admit(gate, tenant, name, limits)
    except Overloaded:
        return True
    return False


async def _end(handle: AdmissionHandle) -> None:
    async with handle:
        pass


class _Quotas:
    """Admission's quotas, with every tenant within its quota."""

    async def admit(self, *args: object, **kwargs: object) -> str:
        return "ticket"

    async def refuse_if_over_quota(self, *args: object, **kwargs: object) -> None:
        return None  # within its quota: a refusal stays the engines' 503

    @contextlib.asynccontextmanager
    async def hold(self, ticket: object) -> AsyncIterator[object]:
        yield ticket


class _SlowAdmission(_Quotas):
    """Admits everything after a Redis-like round trip."""

    async def admit(self, *args: object, **kwargs: object) -> str:
        await asyncio.sleep(0.01)
        return "ticket"


def test_a_burst_cannot_overshoot_the_places_while_admissions_are_in_flight() -> None:
    gate = _gate(places=4)
    gate.quotas = _SlowAdmission()  # type: ignore[assignment]
    tenant = uuid.uuid4()

    async def burst() -> tuple[list[bool], bool]:
        shed = await asyncio.gather(*(_shed(gate, tenant, f"r{i}") for i in range(10)))
        return [not s for s in shed], not await _shed(gate, tenant, "after")

    admitted, after = asyncio.run(burst())
    assert sum(admitted) == 4  # none of the 10 was on an engine yet; the places still held
    assert after is False


def test_ending_a_request_gives_its_place_back() -> None:
    gate, tenant = _gate(places=1), uuid.uuid4()

    async def scenario() -> tuple[bool, bool]:
        first = await _admit(gate, tenant, "r1")
        second_shed = await _shed(gate, tenant, "r2")
        await _end(first)
        return second_shed, await _shed(gate, tenant, "r3")

    assert asyncio.run(scenario()) == (True, False)


def test_a_full_engine_makes_a_request_wait_for_a_place_then_sheds_it_after_the_wait() -> None:
    gate, busy = _gate(places=2, busy_wait_s=0.2), uuid.uuid4()

    async def scenario() -> tuple[bool, bool]:
        running = [await _admit(gate, busy, f"r{i}") for i in range(2)]
        waiting = asyncio.create_task(_admit(gate, uuid.uuid4(), "w"))
        await asyncio.sleep(0.05)
        queued = not waiting.done()  # queued, not refused
        await _end(running[0])  # its place goes to the waiter
        await waiting
        return queued, await _shed(gate, uuid.uuid4(), "late")  # full again: waits, then shed

    assert asyncio.run(scenario()) == (True, True)


def test_a_shed_request_gets_503_with_retry_after() -> None:
    gate, tenant = _gate(places=1), uuid.uuid4()

    async def scenario() -> Overloaded:
        await _admit(gate, tenant, "r1")
        with pytest.raises(Overloaded) as shed:
            await _admit(gate, tenant, "r2")
        return shed.value

    shed = asyncio.run(scenario())
    assert shed.status_code == 503 and int(shed.headers["Retry-After"]) >= 1


class _SlowRelease(_SlowAdmission):
    """Settling a ticket's tokens and leases takes a Redis round trip after the request."""

    def __init__(self) -> None:
        self.settled = asyncio.Event()

    @contextlib.asynccontextmanager
    async def hold(self, ticket: object) -> AsyncIterator[object]:
        try:
            yield ticket
        finally:
            await asyncio.sleep(0.2)
            self.settled.set()


def test_the_engine_place_is_free_before_the_finished_request_is_settled_in_redis() -> None:
    gate = _gate(places=2, busy_wait_s=1.0)
    slow = gate.quotas = _SlowRelease()  # type: ignore[assignment]
    busy = uuid.uuid4()

    async def scenario() -> bool:
        first, _ = [await _admit(gate, busy, f"r{i}") for i in range(2)]
        waiting = asyncio.create_task(_admit(gate, uuid.uuid4(), "r2"))
        ending = asyncio.create_task(_end(first))
        await waiting  # the waiter starts on the engine...
        settled_first = slow.settled.is_set()
        await ending
        return settled_first

    assert asyncio.run(scenario()) is False  # ...while the first is still being settled


def test_a_freed_place_goes_to_the_tenant_with_fewer_requests_running() -> None:
    gate = _gate(places=2, busy_wait_s=1.0)
    noisy, quiet = uuid.uuid4(), uuid.uuid4()

    async def scenario() -> list[str]:
        await _admit(gate, noisy, "n0")
        quiet_running = await _admit(gate, quiet, "q0")
        order: list[str] = []

        async def wait(tenant: uuid.UUID, name: str) -> None:
            await _admit(gate, tenant, name)
            order.append(name)

        waiting = [asyncio.create_task(wait(noisy, f"noisy-{i}")) for i in range(3)]
        await asyncio.sleep(0.01)
        waiting.append(asyncio.create_task(wait(quiet, "quiet")))  # queued last
        await asyncio.sleep(0.01)
        await _end(quiet_running)  # quiet's request ends; noisy still runs one
        await asyncio.sleep(0.01)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return order

    assert asyncio.run(scenario()) == ["quiet"]


def test_a_tenant_within_its_share_is_next_in_line_while_a_flood_is_refused() -> None:
    gate = _gate(places=10)
    flood, quiet = uuid.uuid4(), uuid.uuid4()

    async def scenario() -> tuple[int, bool, bool]:
        running = []
        refused = 0
        for i in range(12):
            try:
                running.append(await _admit(gate, flood, f"f{i}"))
            except Overloaded:
                refused += 1
        waiting = asyncio.create_task(_admit(gate, quiet, "q"))  # below its share of 5
        flood_refused = await _shed(gate, flood, "f-more")
        await asyncio.sleep(0.2)  # past every wait: the quiet tenant is not shed
        still_waiting = not waiting.done()
        await _end(running[0])  # the first place freed goes to it
        await waiting
        return refused, flood_refused, still_waiting

    assert asyncio.run(scenario()) == (2, True, True)


def test_a_tenant_sold_more_requests_a_minute_holds_more_of_the_places_than_a_flood() -> None:
    """Shares follow the requests-per-minute quota: the flood (30/min) that filled 4 of 10
    places first does not hold the quiet tenant (600/min) to half of them."""
    gate = _gate(places=10)
    flood, quiet = uuid.uuid4(), uuid.uuid4()
    small = Quotas(priority=1, requests_per_minute=30)
    large = Quotas(priority=1, requests_per_minute=600)

    async def scenario() -> tuple[int, bool]:
        running = [await _admit(gate, flood, f"f{i}", small) for i in range(4)]
        quiet_in = 0
        for i in range(6):  # six more than an equal share of 5 allows
            await _admit(gate, quiet, f"q{i}", large)
            quiet_in += 1
        flood_refused = await _shed(gate, flood, "f-more", small)
        await _end(running[0])
        return quiet_in, flood_refused

    assert asyncio.run(scenario()) == (6, True)


def test_the_free_tier_fills_less_of_the_places_than_paid_plans() -> None:
    gate = _gate(places=10)
    free, pro = uuid.uuid4(), uuid.uuid4()

    async def scenario() -> tuple[int, bool]:
        admitted = 0
        for i in range(10):
            if await _shed(gate, free, f"free-{i}", Quotas(priority=0)):
                break
            admitted += 1
        return admitted, await _shed(gate, pro, "pro", PRO)

    free_admitted, pro_shed = asyncio.run(scenario())
    assert free_admitted == 8 and not pro_shed  # 0.8 of the places for priority 0


def test_with_admission_off_nothing_is_shed() -> None:
    registry = EngineRegistry()
    registry.add(fake_engine())
    gate = EngineGate(None, None, EngineRouter(registry, cache=None), PlaceBook(off=True))
    tenant = uuid.uuid4()

    async def scenario() -> int:
        return sum([not await _shed(gate, tenant, f"r{i}") for i in range(200)])

    assert asyncio.run(scenario()) == 200


def test_a_waiter_whose_client_left_holds_no_place() -> None:
    gate = _gate(places=1, busy_wait_s=0.05)

    async def scenario() -> tuple[int, int]:
        first = await _admit(gate, uuid.uuid4(), "r1")
        gone = asyncio.create_task(_admit(gate, uuid.uuid4(), "gone"))
        await asyncio.sleep(0.01)
        gone.cancel()  # its client disconnected while it waited
        await asyncio.gather(gone, return_exceptions=True)
        await _end(first)
        await asyncio.sleep(0.2)  # past every wait
        view = gate.pool_view("tiny")
        assert view is not None
        return view.in_flight, view.waiting

    assert asyncio.run(scenario()) == (0, 0)


def test_places_come_from_the_setting_else_the_profile_else_the_engine_slots() -> None:
    engine = fake_engine(gpu_slots=12)
    profiled = places_of_profile("vllm-cpu")
    assert PlaceBook(fixed=3, profiles={"vllm": profiled}).of(engine).places == 3
    by_profile = PlaceBook(parallelism=8, profiles={"vllm": profiled}).of(engine)
    assert by_profile.source == "profile vllm-cpu" and by_profile.config is not None
    assert by_profile.config.ttft_slo_s > 0
    assert PlaceBook(parallelism=8).of(engine).places == 12


def test_a_malformed_profiles_setting_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="kind=profile"):
        PlaceBook.sized(0, 8, "sglang")


def test_the_engines_page_view_shows_the_pool_of_the_engine() -> None:
    gate = _gate(places=3)
    engine = gate.router.registry.get("e")
    assert engine is not None

    async def scenario() -> None:
        await _admit(gate, uuid.uuid4(), "r1")

    assert gate.engine_view(engine) is None  # no request for its base model yet
    asyncio.run(scenario())
    view = gate.engine_view(engine)
    assert view is not None
    assert (view.places, view.source, view.pool.in_flight, view.pool.places) == (3, "setting", 1, 3)


def _profiled_gate(*kinds: str) -> EngineGate:
    """A gate over engines "e", "e2", ... of `kinds`, each paced by its kind's reference
    profile (vllm-cpu, sglang-cpu)."""
    registry = EngineRegistry()
    for n, kind in enumerate(kinds):
        engine = fake_engine()
        engine.id = engine.name = f"e{n + 1}" if n else "e"
        engine.kind = kind
        registry.add(engine)
    book = PlaceBook(profiles={k: places_of_profile(f"{k}-cpu") for k in set(kinds)})
    return EngineGate(None, None, EngineRouter(registry, cache=None), book)


async def _places_now(gate: EngineGate) -> tuple[int, bool]:
    handle = await _admit(gate, uuid.uuid4(), "r")
    await _end(handle)
    view = gate.pool_view("tiny")
    assert view is not None
    return view.places, gate._pools["tiny"].core.config.ttft_model is not None


def test_engines_with_one_profile_are_paced_by_its_ttft_model_alone_and_each_in_a_pool() -> None:
    profiled = places_of_profile("vllm-cpu")
    assert asyncio.run(_places_now(_profiled_gate("vllm"))) == (profiled.holds, True)
    pool = _profiled_gate("vllm", "vllm")
    assert asyncio.run(_places_now(pool)) == (2 * profiled.holds, True)
    assert pool._pools["tiny"].core.holding() == {"e": 0, "e2": 0}  # each engine followed


def test_engines_of_different_profiles_add_their_places_without_a_model() -> None:
    vllm, sglang = places_of_profile("vllm-cpu"), places_of_profile("sglang-cpu")
    gate = _profiled_gate("vllm", "sglang")
    assert asyncio.run(_places_now(gate)) == (vllm.places + sglang.places, False)


def test_the_core_hears_which_engine_a_request_went_to_with_its_first_token() -> None:
    gate = _profiled_gate("vllm", "vllm")

    async def scenario() -> dict[str, int]:
        handle = await _admit(gate, uuid.uuid4(), "r1")
        expected = gate._pools["tiny"].core.holding()
        async with handle:
            handle.first_token("e2", 0.01)  # the router sent it to the second engine
            moved = gate._pools["tiny"].core.holding()
        assert expected == {"e": 1, "e2": 0}
        return moved

    assert asyncio.run(scenario()) == {"e": 0, "e2": 1}


def test_a_tenant_running_all_its_plan_allows_hears_429_not_503_while_places_are_free() -> None:
    """Its requests hold places before their leases reach Redis, so the quota cannot be
    asked yet: the gate answers for the plan with the quota's 429 and Retry-After."""
    gate = _gate(places=8)
    small, other = uuid.uuid4(), uuid.uuid4()
    two = Quotas(priority=1, concurrent_requests=2)

    async def scenario() -> tuple[int, str]:
        held = [await _admit(gate, other, "o1")]
        held += [await _admit(gate, small, f"s{i}", two) for i in range(2)]
        with pytest.raises(RateLimited) as refused:
            await _admit(gate, small, "s3", two)
        for handle in held:
            await _end(handle)
        return refused.value.status_code, refused.value.headers["Retry-After"]

    assert asyncio.run(scenario()) == (429, "1")
