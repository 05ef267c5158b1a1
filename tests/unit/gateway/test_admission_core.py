"""The pure admission core: capacity, fairness and determinism, as invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loraplex.gateway.admission.core import (
    OVER_CONCURRENCY,
    AdmissionCore,
    Admit,
    Arrival,
    CoreConfig,
    EngineReport,
    Event,
    Finished,
    FirstToken,
    PlanLimits,
    QuotaRefused,
    Shed,
    TenantView,
    Tick,
    TtftModel,
    Wait,
    run,
)

PRO = PlanLimits(priority=1, requests_per_minute=600)
SMALL = PlanLimits(priority=1, requests_per_minute=60)
TENANTS = {"a": PRO, "b": PRO, "c": SMALL}
# An engine whose prompt of 24 tokens takes 34 ms alone: 10 ms a step, 1 ms a prompt token
# and a decoding sequence.
ENGINE = TtftModel(base_s=0.01, decode_seq_s=0.001, prefill_token_s=0.001)
WITH_A_MODEL = CoreConfig(ttft_slo_s=0.1, ttft_model=ENGINE)

# One step of a random history: (kind, tenant, places, seconds since the last step).
steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["arrive", "arrive", "arrive", "first", "finish", "report", "tick", "quota"]
        ),
        st.sampled_from(sorted(TENANTS)),
        st.integers(min_value=0, max_value=6),
        st.floats(min_value=0.0, max_value=0.05),
    ),
    max_size=120,
)


def _events(history: list[tuple[str, str, int, float]]) -> list[Event]:
    """A plausible event sequence: first tokens and finishes only for admitted requests is
    not required (the core ignores unknown ids), so any history will do."""
    events: list[Event] = [EngineReport(places=3, at=0.0, prefill_places=2)]
    now, n = 0.0, 0
    for kind, tenant, places, dt in history:
        now += dt
        if kind == "arrive":
            events.append(Arrival(f"r{n}", tenant, TENANTS[tenant], 24, now))
            n += 1
        elif kind in ("first", "finish") and n:
            rid = f"r{places % n}"
            events.append(FirstToken(rid, now) if kind == "first" else Finished(rid, now))
        elif kind == "report":
            events.append(EngineReport(places=places, at=now, prefill_places=max(1, places)))
        elif kind == "quota":
            events.append(QuotaRefused(tenant, now))
        else:
            events.append(Tick(now))
    return events


@pytest.mark.parametrize("config", [CoreConfig(ttft_slo_s=0.1), WITH_A_MODEL])
@settings(max_examples=150, deadline=None)
@given(steps)
def test_never_admits_past_the_places_it_was_told(
    config: CoreConfig, history: list[tuple[str, str, int, float]]
) -> None:
    core = AdmissionCore(config)
    for event in _events(history):
        if any(isinstance(d, Admit) for d in core.handle(event)):
            assert core.in_flight <= core.places


@pytest.mark.parametrize("config", [CoreConfig(), WITH_A_MODEL])
@settings(max_examples=150, deadline=None)
@given(steps)
def test_same_events_give_the_same_decisions(
    config: CoreConfig, history: list[tuple[str, str, int, float]]
) -> None:
    events = _events(history)
    assert run(AdmissionCore(config), events) == run(AdmissionCore(config), events)


@pytest.mark.parametrize(
    "config",
    [
        CoreConfig(max_wait_s=0.02, busy_wait_s=0.01),
        CoreConfig(max_wait_s=0.02, busy_wait_s=0.01, ttft_slo_s=0.1, ttft_model=ENGINE),
    ],
)
@settings(max_examples=150, deadline=None)
@given(steps)
def test_a_tenant_below_its_share_is_not_shed_while_another_holds_a_place_over_its_own(
    config: CoreConfig, history: list[tuple[str, str, int, float]]
) -> None:
    core = AdmissionCore(config)
    for event in _events(history):
        shares = core.shares()
        running = dict(core._running)
        queued = {t: len(q) for t, q in core._queues.items()}
        tenant_of = {w.request_id: t for t, q in core._queues.items() for w in q}
        if isinstance(event, Arrival):
            tenant_of[event.request_id] = event.tenant
        for decision in core.handle(event):
            if not isinstance(decision, Shed):
                continue
            tenant = tenant_of[decision.request_id]
            within = running.get(tenant, 0) + queued.get(tenant, 0) <= shares.get(tenant, 0.0)
            someone_over = any(
                n >= shares.get(t, 0.0) + 1 for t, n in running.items() if t != tenant
            )
            assert not (within and someone_over), (tenant, shares, running)


def test_a_freed_place_goes_to_the_tenant_furthest_below_its_share() -> None:
    core = AdmissionCore()
    core.handle(EngineReport(places=2, at=0.0))
    core.handle(Arrival("a1", "a", PRO, 24, 0.0))
    core.handle(Arrival("a2", "a", PRO, 24, 0.0))
    assert core.handle(Arrival("a3", "a", PRO, 24, 0.001)) == [Wait("a3", 0.021)]
    assert isinstance(core.handle(Arrival("b1", "b", PRO, 24, 0.002))[-1], Wait)
    assert core.handle(Finished("a1", 0.01)) == [Admit("b1", 0.01)]


def test_a_quota_refusal_changes_no_decision() -> None:
    events: list[Event] = [EngineReport(places=1, at=0.0), Arrival("a1", "a", SMALL, 24, 0.0)]
    later: list[Event] = [Arrival("a2", "a", SMALL, 24, 0.2), Tick(0.3)]
    refused = [*events, QuotaRefused("a", 0.1), *later]
    assert run(AdmissionCore(), refused) == run(AdmissionCore(), [*events, *later])


def test_with_a_model_a_prompt_that_would_miss_its_slo_waits_for_a_first_token() -> None:
    core = AdmissionCore(WITH_A_MODEL)
    core.handle(EngineReport(places=64, at=0.0))
    # three prompts prefill in one step of 82 ms; a fourth would make it 106, over 100
    firsts = [core.handle(Arrival(f"r{i}", "a", PRO, 24, 0.0))[-1] for i in range(4)]
    assert [type(d) for d in firsts] == [Admit, Admit, Admit, Wait]
    core.handle(FirstToken("r0", 0.04))
    core.handle(FirstToken("r1", 0.04))
    # with three decoding, the fourth's TTFT is 40 + 13 + 34 = 87 ms: in time
    assert core.handle(FirstToken("r2", 0.04)) == [Admit("r3", 0.04)]


def test_with_a_model_a_wait_that_can_no_longer_meet_the_slo_is_shed() -> None:
    core = AdmissionCore(WITH_A_MODEL)
    core.handle(EngineReport(places=64, at=0.0))
    for i in range(4):
        core.handle(Arrival(f"r{i}", "a", PRO, 24, 0.0))
    # no first token by 66 ms: what is left of the SLO is under one prompt alone
    assert core.handle(Tick(0.066)) == [Shed("r3", "waited_too_long", 1.0)]


def test_with_a_model_a_prompt_behind_a_prefill_step_is_not_pushed_past_its_slo() -> None:
    core = AdmissionCore(WITH_A_MODEL)
    core.handle(EngineReport(places=64, at=0.0))
    assert core.handle(Arrival("r0", "a", PRO, 24, 0.0)) == [Admit("r0", 0.0)]
    # r1 comes while r0's prefill step (0-34 ms) runs: it prefills in the next step
    assert core.handle(Arrival("r1", "b", PRO, 24, 0.001)) == [Admit("r1", 0.001)]
    # a prompt of 40 tokens sharing r1's step makes it 74 ms: r1's first token at 108 ms,
    # over its 101
    assert isinstance(core.handle(Arrival("r2", "c", PRO, 40, 0.015))[-1], Wait)
    # one of 24 tokens makes it 58 ms: 92 ms, in time (what is left of r0's step counts,
    # 19 ms at 15 ms, not the whole step again)
    assert core.handle(Arrival("r3", "d", PRO, 24, 0.015)) == [Admit("r3", 0.015)]


def test_a_long_prompt_is_due_by_its_own_unloaded_ttft() -> None:
    config = CoreConfig(ttft_slo_s=0.1, ttft_model=ENGINE, ttft_slo_multiple=3.0)
    core = AdmissionCore(config)
    core.handle(EngineReport(places=64, at=0.0))
    # 600 tokens take 0.61 s alone: over the 0.1 s SLO, within three times its own
    assert core.handle(Arrival("long", "a", PRO, 600, 0.0)) == [Admit("long", 0.0)]


def test_vllm_decodes_in_the_prefill_step_and_sglang_does_not() -> None:
    mixed = TtftModel(0.01, 0.001, 0.001, mixed_steps=True)
    # ten decoding: a decode step of 20 ms in progress, then the prefill step
    assert ENGINE.first_token_s(10, 24, 1) == pytest.approx(0.020 + 0.034)
    assert mixed.first_token_s(10, 24, 1) == pytest.approx(0.020 + 0.044)


def test_the_snapshot_shows_each_tenants_share_running_and_waiting() -> None:
    core = AdmissionCore()
    core.handle(EngineReport(places=2, at=0.0, prefill_places=None))
    core.handle(Arrival("a1", "a", PRO, 24, 0.0))
    core.handle(Arrival("b1", "b", PRO, 24, 0.0))
    core.handle(Arrival("b2", "b", PRO, 24, 0.001))
    view = core.snapshot()
    assert (view.places, view.in_flight, view.prefilling, view.waiting) == (2, 2, 2, 1)
    assert view.tenants == (TenantView("a", 1.0, 1, 0), TenantView("b", 1.0, 1, 1))


def test_a_wait_that_runs_out_is_shed_with_retry_after() -> None:
    core = AdmissionCore(CoreConfig(busy_wait_s=0.01, retry_after_s=2.0))
    core.handle(EngineReport(places=1, at=0.0))
    core.handle(Arrival("a1", "a", PRO, 24, 0.0))
    core.handle(Arrival("a2", "a", PRO, 24, 0.0))
    assert core.handle(Tick(0.02)) == [Shed("a2", "waited_too_long", 2.0)]


def test_plan_limits_are_typed_and_weigh_what_the_plan_bought() -> None:
    assert PRO.weight == 2.0
    assert SMALL.weight < PRO.weight
    assert PlanLimits(concurrent_requests=3).claim().bound == 3.0


def test_a_tenant_between_two_requests_keeps_its_share() -> None:
    core = AdmissionCore(CoreConfig(share_linger_s=1.0))
    core.handle(EngineReport(places=4, at=0.0))
    core.handle(Arrival("b1", "b", PRO, 24, 0.0))
    core.handle(Finished("b1", 0.1))  # b is between two requests: its share is still 2
    decisions = [core.handle(Arrival(f"a{i}", "a", PRO, 24, 0.2))[-1] for i in range(4)]
    assert [type(d) for d in decisions] == [Admit, Admit, Wait, Wait]
    assert core.handle(Arrival("b2", "b", PRO, 24, 0.3)) == [Admit("b2", 0.3)]


def test_a_tenant_alone_may_take_every_place() -> None:
    core = AdmissionCore()
    core.handle(EngineReport(places=3, at=0.0))
    decisions = [core.handle(Arrival(f"a{i}", "a", PRO, 24, 0.0))[-1] for i in range(3)]
    assert all(isinstance(d, Admit) for d in decisions)


def test_a_tenant_running_all_its_plan_allows_is_refused_for_its_plan_not_the_load() -> None:
    """With places free and another tenant active, the third request of a plan of two
    concurrent requests is refused as over that plan (the gate's 429), not for load."""
    two = PlanLimits(priority=1, requests_per_minute=600, concurrent_requests=2)
    core = AdmissionCore(CoreConfig(retry_after_s=1.0))
    core.handle(EngineReport(places=8, at=0.0))
    core.handle(Arrival("b1", "b", PRO, 24, 0.0))
    assert [core.handle(Arrival(f"a{i}", "a", two, 24, 0.0))[-1] for i in (1, 2)] == [
        Admit("a1", 0.0),
        Admit("a2", 0.0),
    ]
    assert core.handle(Arrival("a3", "a", two, 24, 0.0)) == [Shed("a3", OVER_CONCURRENCY, 1.0)]
    core.handle(Finished("a1", 0.1))
    assert core.handle(Arrival("a4", "a", two, 24, 0.1)) == [Admit("a4", 0.1)]
