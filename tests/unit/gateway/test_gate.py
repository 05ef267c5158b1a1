"""The in-flight cap sheds the lowest priority first and never refuses an idle engine."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from loraplex.gateway import gate as gate_module
from loraplex.gateway.admission.engine_cap import (
    TAIL_MULTIPLE,
    TAIL_SAMPLES,
    WARM_WITHIN_S,
    AdaptiveCap,
)
from loraplex.gateway.admission.errors import Overloaded, RateLimited
from loraplex.gateway.gate import EngineGate, in_flight_allowance
from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.serving.engines.protocol import EngineLoad
from loraplex.serving.registry import EngineHandle, EngineRegistry
from tests.support.fake_driver import fake_engine

TARGET = Target(model="tiny", base_model="tiny", max_context=4096, base_source="/nowhere")


def _gate(in_flight: int, cap: int) -> EngineGate:
    registry = EngineRegistry()
    registry.add(fake_engine(in_flight=in_flight))
    return EngineGate(
        None,
        None,
        EngineRouter(registry, cache=None),
        parallelism=1,  # type: ignore[arg-type]
        max_in_flight=cap,
    )


ADMIT_ARGS = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)


def _adaptive_gate() -> tuple[EngineGate, EngineHandle]:
    """A gate with the adaptive cap on engine "e", which has nothing in flight."""
    gate = _gate(in_flight=0, cap=0)
    gate.adaptive = True
    engine = gate.router.registry.get("e")
    assert engine is not None
    return gate, engine


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


class _Quotas:
    """Admission's quotas, with every tenant within its quota."""

    async def admit(self, *args: object, **kwargs: object) -> str:
        return "ticket"

    async def refuse_if_over_quota(self, *args: object, **kwargs: object) -> None:
        return None  # within its quota: a refusal stays the engine's 503

    @contextlib.asynccontextmanager
    async def hold(self, ticket: object) -> AsyncIterator[object]:
        yield ticket


class _SlowAdmission(_Quotas):
    """Admits everything after a Redis-like round trip."""

    async def admit(self, *args: object, **kwargs: object) -> str:
        await asyncio.sleep(0.01)
        return "ticket"

    async def refuse_if_over_quota(self, *args: object, **kwargs: object) -> None:
        await asyncio.sleep(0.01)


def test_a_burst_cannot_overshoot_the_cap_while_admissions_are_in_flight() -> None:
    gate = _gate(in_flight=0, cap=4)
    gate.quotas = _SlowAdmission()  # type: ignore[assignment]

    async def one() -> bool:
        try:
            await gate.admit(
                uuid.uuid4(),
                {"priority": 1},
                "r",
                stream=True,
                target=TARGET,
                prompt_tokens=1,
                max_tokens=1,
            )
        except Overloaded:
            return False
        return True

    async def burst() -> tuple[list[bool], bool]:
        admitted = await asyncio.gather(*(one() for _ in range(10)))
        return admitted, await one()

    admitted, after = asyncio.run(burst())
    assert sum(admitted) == 4  # none of the 10 was on an engine yet; the cap still held
    assert after is False


def test_ending_a_request_gives_its_place_back() -> None:
    gate = _gate(in_flight=0, cap=1)

    async def scenario() -> None:
        args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)
        ticket = await gate.admit(uuid.uuid4(), {"priority": 1}, "r1", **args)  # type: ignore[arg-type]
        with pytest.raises(Overloaded):
            await gate.admit(uuid.uuid4(), {"priority": 1}, "r2", **args)  # type: ignore[arg-type]
        async with gate.hold(ticket, TARGET):
            pass
        await gate.admit(uuid.uuid4(), {"priority": 1}, "r3", **args)  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_at_the_cap_a_request_waits_for_a_place_then_is_shed_after_the_wait() -> None:
    gate = _gate(in_flight=0, cap=1)
    gate.queue_wait_s = 0.2
    args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)

    async def scenario() -> tuple[bool, bool]:
        first = await gate.admit(uuid.uuid4(), {"priority": 1}, "r1", **args)  # type: ignore[arg-type]
        waiting = asyncio.create_task(gate.admit(uuid.uuid4(), {"priority": 1}, "r2", **args))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert not waiting.done()  # queued, not refused
        async with gate.hold(first, TARGET):
            pass  # the first request ends: its place goes to the waiter
        await waiting
        try:
            await gate.admit(uuid.uuid4(), {"priority": 1}, "r3", **args)  # type: ignore[arg-type]
        except Overloaded:
            return True, True
        return True, False

    got_in, third_shed = asyncio.run(scenario())
    assert got_in and third_shed


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
    gate = _gate(in_flight=0, cap=1)
    gate.queue_wait_s = 1.0
    slow = gate.quotas = _SlowRelease()  # type: ignore[assignment]
    args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)

    async def scenario() -> bool:
        first = await gate.admit(uuid.uuid4(), {"priority": 1}, "r1", **args)  # type: ignore[arg-type]
        waiting = asyncio.create_task(gate.admit(uuid.uuid4(), {"priority": 1}, "r2", **args))  # type: ignore[arg-type]

        async def run_first() -> None:
            async with gate.hold(first, TARGET):  # type: ignore[arg-type]
                pass

        ending = asyncio.create_task(run_first())
        await waiting  # the waiter starts on the engine...
        settled_first = slow.settled.is_set()
        await ending
        return settled_first

    assert asyncio.run(scenario()) is False  # ...while the first is still being settled


def test_a_freed_place_goes_to_the_tenant_with_fewer_requests_running() -> None:
    gate = _gate(in_flight=0, cap=2)
    gate.queue_wait_s = 1.0
    noisy, quiet = uuid.uuid4(), uuid.uuid4()
    args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)

    async def scenario() -> list[str]:
        running = [await gate.admit(t, {"priority": 1}, "r", **args) for t in (noisy, quiet)]  # type: ignore[arg-type]
        order: list[str] = []

        async def wait(tenant: uuid.UUID, name: str) -> None:
            await gate.admit(tenant, {"priority": 1}, name, **args)  # type: ignore[arg-type]
            order.append(name)

        waiting = [asyncio.create_task(wait(noisy, f"noisy-{i}")) for i in range(3)]
        await asyncio.sleep(0.01)
        waiting.append(asyncio.create_task(wait(quiet, "quiet")))  # queued last
        await asyncio.sleep(0.01)
        async with gate.hold(running[1], TARGET, quiet):
            pass  # quiet's request ends; noisy still runs one
        await asyncio.sleep(0.01)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return order

    assert asyncio.run(scenario()) == ["quiet"]


def test_a_tenant_within_its_share_is_not_refused_while_another_holds_more_than_its_own() -> None:
    gate = _gate(in_flight=0, cap=10)  # priority 1: 10 places
    flood, quiet = uuid.uuid4(), uuid.uuid4()
    args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)

    async def scenario() -> tuple[int, bool]:
        refused = 0
        for i in range(12):
            try:
                await gate.admit(flood, {"priority": 1}, f"f{i}", **args)  # type: ignore[arg-type]
            except Overloaded:
                refused += 1
        await gate.admit(quiet, {"priority": 1}, "q", **args)  # type: ignore[arg-type]
        try:
            await gate.admit(flood, {"priority": 1}, "f-more", **args)  # type: ignore[arg-type]
        except Overloaded:
            return refused, True
        return refused, False

    flood_refused, flood_refused_after = asyncio.run(scenario())
    assert flood_refused == 2 and flood_refused_after  # the flood is refused, the quiet one is in


def test_a_tenant_sold_more_requests_a_minute_holds_more_of_the_cap_than_a_flood() -> None:
    """Shares follow the requests-per-minute quota: the flood (30/min) that filled 4 of 10
    places first does not hold the quiet tenant (600/min) to half of them."""
    gate = _gate(in_flight=0, cap=10)
    flood, quiet = uuid.uuid4(), uuid.uuid4()
    small, large = (
        {"priority": 1, "requests_per_minute": 30},
        {"priority": 1, "requests_per_minute": 600},
    )
    args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)

    async def scenario() -> bool:
        for i in range(4):
            await gate.admit(flood, small, f"f{i}", **args)  # type: ignore[arg-type]
        for i in range(7):  # the 7th is past the cap and past an equal share of 5
            await gate.admit(quiet, large, f"q{i}", **args)  # type: ignore[arg-type]
        try:
            await gate.admit(flood, small, "f-more", **args)  # type: ignore[arg-type]
        except Overloaded:
            return True
        return False

    assert asyncio.run(scenario())  # the quiet tenant got in, the flood's next is refused


def test_the_adaptive_cap_grows_from_the_engine_slots_while_requests_are_fast() -> None:
    gate, engine = _adaptive_gate()
    args = ADMIT_ARGS

    async def serve(n: int, ttft_s: float) -> None:
        for i in range(n):
            tickets = []
            for j in range(gate.cap_of(engine)):  # fill the cap, as a busy engine is
                tickets.append(await gate.admit(uuid.uuid4(), {"priority": 1}, f"r{i}-{j}", **args))  # type: ignore[arg-type]
                if i == 0 and j == 0:  # the first finds the engine idle, and is alone
                    gate.first_token("e", 0.05, request_id="r0-0")  # through its prefill
            for j, ticket in enumerate(tickets):
                async with gate.hold(ticket, TARGET):
                    pass
                gate.observe("e", 0.5, 1, 0.05 if i == 0 and j == 0 else ttft_s, f"r{i}-{j}")

    assert gate.cap_of(engine) == 4  # the engine's GPU slots
    asyncio.run(serve(5, ttft_s=0.06))
    assert engine.in_flight_cap is not None and engine.in_flight_cap > 4


async def _serve_fast_and_slow_pairs(
    gate: EngineGate, pairs: int, before_the_slow_one: Callable[[int], None] = lambda _: None
) -> None:
    """Pairs of requests at once: the first finds the engine idle and is fast (50 ms), the
    second, admitted beside it, is ten times slower; `before_the_slow_one(pair)` runs just
    before the slow one's first token is reported."""
    for i in range(pairs):
        alone = await gate.admit(uuid.uuid4(), {"priority": 1}, f"a{i}", **ADMIT_ARGS)  # type: ignore[arg-type]
        gate.first_token("e", 0.05, request_id=f"a{i}")  # alone through its prefill
        beside = await gate.admit(uuid.uuid4(), {"priority": 1}, f"b{i}", **ADMIT_ARGS)  # type: ignore[arg-type]
        for ticket, rid, ttft_s in ((alone, f"a{i}", 0.05), (beside, f"b{i}", 0.5)):
            async with gate.hold(ticket, TARGET):
                pass
            if rid == f"b{i}":
                before_the_slow_one(i)
            gate.observe("e", 0.5, 1, ttft_s, rid)


def test_a_cut_of_the_adaptive_cap_is_shown_with_its_reason_and_counted() -> None:
    gate, engine = _adaptive_gate()
    labels = {"engine": "e", "reason": "slow_first_tokens"}
    before = REGISTRY.get_sample_value("loraplex_engine_in_flight_cap_cuts_total", labels) or 0

    gate.cap_of(engine)
    asyncio.run(_serve_fast_and_slow_pairs(gate, 4))  # eight first tokens: the least window

    assert engine.cap_cuts == 1 and engine.cap_last_cut_at is not None
    assert engine.cap_last_cut.startswith("4 -> 2: median TTFT")  # kept at least half
    assert "over the 100 ms target" in engine.cap_last_cut
    assert engine.cap_target_ms == 100.0  # shown beside the cap, and as a gauge
    target = REGISTRY.get_sample_value("loraplex_engine_ttft_target_seconds", {"engine": "e"})
    assert target == pytest.approx(0.1)
    after = REGISTRY.get_sample_value("loraplex_engine_in_flight_cap_cuts_total", labels)
    assert after == before + 1


def test_two_cuts_at_one_look_are_counted_each_under_its_own_reason() -> None:
    gate, engine = _adaptive_gate()
    metric = "loraplex_engine_in_flight_cap_cuts_total"
    reasons = ("slow_first_tokens", "engine_queue")
    before = {
        r: REGISTRY.get_sample_value(metric, {"engine": "e", "reason": r}) or 0 for r in reasons
    }

    def probe_a_queue(pair: int) -> None:
        # the engine's queue is probed twice in a row, the second time just before the
        # first token that cuts for slow first tokens
        if pair >= 2:
            engine.engine_load = EngineLoad(running=1, waiting=3)
            engine.engine_load_probes += 1

    gate.cap_of(engine)
    asyncio.run(_serve_fast_and_slow_pairs(gate, 4, before_the_slow_one=probe_a_queue))

    assert engine.cap_cuts == 2
    for reason in reasons:
        after = REGISTRY.get_sample_value(metric, {"engine": "e", "reason": reason})
        assert after == before[reason] + 1, reason


def test_the_tail_target_is_shown_once_enough_idle_requests_are_in() -> None:
    gate, engine = _adaptive_gate()
    args = ADMIT_ARGS

    async def serve_alone(ttfts: list[float]) -> None:
        for i, ttft_s in enumerate(ttfts):  # one at a time: each finds the engine idle
            ticket = await gate.admit(uuid.uuid4(), {"priority": 1}, f"r{i}", **args)  # type: ignore[arg-type]
            async with gate.hold(ticket, TARGET):
                pass
            gate.observe("e", 0.5, 1, ttft_s, f"r{i}")

    gate.cap_of(engine)
    asyncio.run(serve_alone([0.05] * (TAIL_SAMPLES - 1)))
    assert engine.cap_tail_target_ms is None  # too few idle requests for a 90th percentile
    asyncio.run(serve_alone([0.08] * 10))
    assert engine.cap_tail_target_ms == pytest.approx(TAIL_MULTIPLE * 80.0, abs=0.5)  # of idle p90
    gauge = REGISTRY.get_sample_value("loraplex_engine_ttft_tail_target_seconds", {"engine": "e"})
    assert gauge == pytest.approx(engine.cap_tail_target_ms / 1000)


def test_a_request_that_finds_the_engine_after_a_quiet_spell_teaches_the_cap_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As measured on CPU, a request after 0.3-1 s of quiet took twice as long as one
    # right after another: the host was cold, not the engine loaded.
    gate, engine = _adaptive_gate()
    args = ADMIT_ARGS
    now = [1000.0]  # the gate's clock, moved by hand: a slow host cannot make "right after" late
    monkeypatch.setattr(gate_module, "time", SimpleNamespace(monotonic=lambda: now[0]))

    async def serve_alone(rid: str, ttft_s: float) -> None:
        ticket = await gate.admit(uuid.uuid4(), {"priority": 1}, rid, **args)  # type: ignore[arg-type]
        async with gate.hold(ticket, TARGET):
            gate.first_token("e", ttft_s, request_id=rid)

    gate.cap_of(engine)
    asyncio.run(serve_alone("warm", 0.05))
    assert engine.cap_target_ms == 100.0
    now[0] += 2 * WARM_WITHIN_S
    asyncio.run(serve_alone("cold", 0.5))  # would be the idle median's half, or a cut
    assert engine.cap_target_ms == 100.0 and engine.cap_cuts == 0
    asyncio.run(serve_alone("warm again", 0.07))  # right after: warm, and taught
    assert engine.cap_target_ms == pytest.approx(120.0)  # twice the median of 50 and 70


def test_an_idle_request_joined_before_its_first_token_is_no_idle_reference() -> None:
    # A Poisson arrival can share an idle request's prefill; as measured, the idle
    # requests' p90 then ran over the bench's unloaded p99.
    gate, engine = _adaptive_gate()
    args = ADMIT_ARGS

    async def serve() -> None:
        first = await gate.admit(uuid.uuid4(), {"priority": 1}, "first", **args)  # type: ignore[arg-type]
        async with gate.hold(first, TARGET):
            second = await gate.admit(uuid.uuid4(), {"priority": 1}, "second", **args)  # type: ignore[arg-type]
            async with gate.hold(second, TARGET):
                gate.first_token("e", 0.09, request_id="first")
                gate.first_token("e", 0.09, request_id="second")

    gate.cap_of(engine)
    asyncio.run(serve())
    assert engine.cap_target_ms is None  # no idle request yet: the cap holds at its seed


def test_the_cap_learns_from_a_first_token_before_its_request_ends_and_only_once() -> None:
    gate, engine = _adaptive_gate()
    args = ADMIT_ARGS

    async def serve() -> None:
        ticket = await gate.admit(uuid.uuid4(), {"priority": 1}, "r", **args)  # type: ignore[arg-type]
        async with gate.hold(ticket, TARGET):
            gate.first_token("e", 0.05, request_id="r")  # the stream is still running
            assert engine.cap_target_ms == 100.0  # an idle request's TTFT taught it
        gate.observe("e", 0.5, 1, 0.5, "r")  # the end, with the same request: not again

    gate.cap_of(engine)
    asyncio.run(serve())
    assert gate.caps["e"].idle_ttft_s == 0.05


def test_at_the_cap_a_tenant_below_its_share_waits_for_the_next_place_a_heavy_one_is_shed() -> None:
    gate = _gate(in_flight=0, cap=4)
    gate.queue_wait_s = 0.01  # what a tenant at or above its share waits
    x, y, newcomer = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)

    async def scenario() -> tuple[bool, bool]:
        held = [
            await gate.admit(t, {"priority": 1}, f"{t}-{i}", **args)  # type: ignore[arg-type]
            for t in (x, y)
            for i in range(2)
        ]
        # At the cap, x and y run 2 each; with the newcomer each share is 4/3.
        waiting = asyncio.create_task(gate.admit(newcomer, {"priority": 1}, "n", **args))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        x_shed = False
        try:
            await gate.admit(x, {"priority": 1}, "x-more", **args)  # type: ignore[arg-type]
        except Overloaded:
            x_shed = True
        await asyncio.sleep(0.03)  # past queue_wait_s: the newcomer still waits
        still_waiting = not waiting.done()
        async with gate.hold(held[0], TARGET, x):
            pass
        await waiting  # the freed place went to it
        return x_shed, still_waiting

    assert asyncio.run(scenario()) == (True, True)


def test_a_request_at_a_cap_left_low_with_clear_room_raises_it_instead_of_being_shed() -> None:
    gate, engine = _adaptive_gate()
    cap = gate.caps.setdefault("e", AdaptiveCap(seed=4))
    cap.on_first_token(0.05, admitted_at=0.0, idle=True, at_cap=False, now=0.05)
    for i in range(8):  # a burst cut the cap: 4 -> 2
        cap.on_first_token(0.5, admitted_at=1.0 + i / 100, idle=False, at_cap=True, now=2.0)
    for i in range(8):  # then first tokens as fast as on an idle engine, the cap not binding
        cap.on_first_token(0.05, admitted_at=3.0 + i, idle=False, at_cap=False, now=3.1 + i)
    assert cap.value == 2
    args = dict(stream=True, target=TARGET, prompt_tokens=1, max_tokens=1)
    tenant = uuid.uuid4()

    async def scenario() -> list[str]:
        seen = []
        for i in range(4):  # one tenant, alone, sends a burst of four
            try:
                await gate.admit(tenant, {"priority": 1}, f"r{i}", **args)  # type: ignore[arg-type]
                seen.append("in")
            except Overloaded:
                seen.append("shed")
        return seen

    # Two fill the cap; the third raises it (3), the fourth waits for a first token to
    # show the engine still has room, and without one it is shed.
    assert asyncio.run(scenario()) == ["in", "in", "in", "shed"]
    assert engine.in_flight_cap == 3


def _learn_a_burst_limit(gate: EngineGate, heavy: uuid.UUID) -> None:
    """Five idle requests at 50 ms (a tail target of 87.5 ms), then a burst of three from
    `heavy` whose first tokens all take 200 ms: the engine learns a limit of two."""

    async def serve() -> None:
        for i in range(TAIL_SAMPLES):  # one at a time: each finds the engine idle
            ticket = await gate.admit(uuid.uuid4(), {"priority": 1}, f"idle{i}", **ADMIT_ARGS)  # type: ignore[arg-type]
            async with gate.hold(ticket, TARGET):
                pass
            gate.observe("e", 0.5, 1, 0.05, f"idle{i}")
        burst = [f"burst{i}" for i in range(3)]
        for rid in burst:  # no limit learned yet: the three go in and share their prefill
            await gate.admit(heavy, {"priority": 1}, rid, **ADMIT_ARGS)  # type: ignore[arg-type]
        for rid in burst:
            gate.first_token("e", 0.2, request_id=rid)
        for rid in burst:
            async with gate.hold(None, TARGET, heavy):
                pass
            gate.observe("e", 0.5, 1, 0.2, rid)

    asyncio.run(serve())


async def _fill_the_cap_until_shed(gate: EngineGate, tenant: uuid.UUID) -> None:
    """`tenant` fills the cap until the cap sheds a request (it may first be raised once
    for room); then the requests in get their first tokens and end."""
    admitted: list[str] = []
    with pytest.raises(Overloaded):
        for i in range(8):
            await gate.admit(tenant, {"priority": 1}, f"fill{i}", **ADMIT_ARGS)  # type: ignore[arg-type]
            admitted.append(f"fill{i}")
    for rid in admitted:
        gate.first_token("e", 0.05, request_id=rid)
        async with gate.hold(None, TARGET, tenant):
            pass
        gate.observe("e", 0.5, 1, 0.05, rid)


class _QuotaRefusesOnce(_Quotas):
    """Admission's quotas, where the first request of `tenant` is over its quota (429)."""

    def __init__(self, tenant: uuid.UUID):
        self.tenant, self.refused = tenant, False

    async def admit(self, tenant_id: uuid.UUID, *args: object, **kwargs: object) -> str:
        if tenant_id == self.tenant and not self.refused:
            self.refused = True
            raise RateLimited("rate_limit_exceeded", "over its requests per minute", {})
        return "ticket"


@pytest.mark.parametrize("refused_by", ["the cap", "its quota", None])
def test_a_burst_past_the_learned_limit_is_shed_from_a_tenant_just_refused_only(
    refused_by: str | None,
) -> None:
    gate, engine = _adaptive_gate()
    heavy, light = uuid.uuid4(), uuid.uuid4()
    gate.cap_of(engine)
    _learn_a_burst_limit(gate, heavy)
    assert engine.burst_limit == 2
    shed = {"reason": "engine_burst", "tenant": str(heavy)}
    shed_before = REGISTRY.get_sample_value("loraplex_admission_rejections_total", shed) or 0

    async def burst() -> bool:
        if refused_by == "the cap":  # the heavy tenant offers more than the engine takes
            await _fill_the_cap_until_shed(gate, heavy)
        if refused_by == "its quota":  # ... or more than its plan allows
            gate.quotas = _QuotaRefusesOnce(heavy)  # type: ignore[assignment]
            with pytest.raises(RateLimited):
                await gate.admit(heavy, {"priority": 1}, "over", **ADMIT_ARGS)  # type: ignore[arg-type]
        for i in range(2):  # the engine has room: two of its four places
            await gate.admit(heavy, {"priority": 1}, f"again{i}", **ADMIT_ARGS)  # type: ignore[arg-type]
        try:
            await gate.admit(heavy, {"priority": 1}, "again2", **ADMIT_ARGS)  # type: ignore[arg-type]
        except Overloaded:
            third_in = False
        else:
            third_in = True
        # beside the heavy tenant's burst, a tenant refused by neither goes in
        await gate.admit(light, {"priority": 1}, "light", **ADMIT_ARGS)  # type: ignore[arg-type]
        return third_in

    third_in = asyncio.run(burst())
    assert third_in is (refused_by is None)  # otherwise a burst shares its prefill, as before
    shed_after = REGISTRY.get_sample_value("loraplex_admission_rejections_total", shed) or 0
    assert shed_after == shed_before + (0 if refused_by is None else 1)
