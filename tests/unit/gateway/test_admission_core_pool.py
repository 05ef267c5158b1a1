"""The admission core over a pool of engines: each engine's places, the engine a request
goes to, and a pool of one engine deciding as the lone-engine core does."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from loraplex.gateway.admission.core import (
    AdmissionCore,
    Admit,
    Arrival,
    CoreConfig,
    Decision,
    EngineReport,
    Event,
    Finished,
    FirstToken,
    PoolEngine,
    Routed,
    run,
)
from tests.unit.gateway.test_admission_core import (
    PRO,
    WITH_A_MODEL,
    _events,
    steps,
)

CONFIGS = [CoreConfig(ttft_slo_s=0.1), WITH_A_MODEL]


def _named(events: list[Event], names: tuple[str, ...]) -> list[Event]:
    """The same events for a pool of `names`, each engine given an equal part of the places
    (the first the rest), and each first token told its engine as the gate tells it."""
    named: list[Event] = []
    for event in events:
        if isinstance(event, EngineReport):
            part, rest = divmod(event.places, len(names))
            engines = tuple(
                PoolEngine(name, part + (rest if i == 0 else 0)) for i, name in enumerate(names)
            )
            event = dataclasses.replace(event, engines=engines)
        named.append(event)
    return named


def _plain(decisions: list[Decision]) -> list[Decision]:
    """Decisions without the engine an admission names."""
    return [dataclasses.replace(d, engine="") if isinstance(d, Admit) else d for d in decisions]


@pytest.mark.parametrize("config", CONFIGS)
@settings(max_examples=150, deadline=None)
@given(steps)
def test_a_pool_of_one_engine_decides_as_the_lone_engine_core(
    config: CoreConfig, history: list[tuple[str, str, int, float]]
) -> None:
    events = _events(history)
    lone = run(AdmissionCore(config), events)
    pool_events: list[Event] = []
    for event in _named(events, ("engine-a",)):
        if isinstance(event, FirstToken):  # the gate tells the engine with the first token
            pool_events.append(Routed(event.request_id, "engine-a", event.at))
        pool_events.append(event)
    pooled = run(AdmissionCore(config), pool_events)
    assert _plain(pooled) == lone
    assert {d.engine for d in pooled if isinstance(d, Admit)} <= {"engine-a"}


@pytest.mark.parametrize("config", CONFIGS)
@settings(max_examples=150, deadline=None)
@given(steps)
def test_never_admits_past_what_any_engine_holds(
    config: CoreConfig, history: list[tuple[str, str, int, float]]
) -> None:
    names = ("engine-a", "engine-b", "engine-c")
    core = AdmissionCore(config)
    places: dict[str, int] = {}
    holding: dict[str, str] = {}  # request -> the engine its admission named
    for event in _named(_events(history), names):
        if isinstance(event, EngineReport):
            places = {e.engine: e.places for e in event.engines}
        if isinstance(event, Finished):
            holding.pop(event.request_id, None)
        for decision in core.handle(event):
            if isinstance(decision, Admit):
                on_it = sum(1 for e in holding.values() if e == decision.engine)
                assert on_it < places[decision.engine]
                holding[decision.request_id] = decision.engine
        assert core.in_flight == len(holding)


def _burst(core: AdmissionCore, report: EngineReport, prompts: int) -> list[Admit]:
    """The admissions of `prompts` short prompts arriving at once after `report`."""
    core.handle(report)
    decisions = run(core, [Arrival(f"r{i}", "a", PRO, 24, 0.0) for i in range(prompts)])
    return [d for d in decisions if isinstance(d, Admit)]


def test_a_pool_of_two_engines_takes_twice_the_burst_of_one_each_to_its_own_slo() -> None:
    lone = _burst(AdmissionCore(WITH_A_MODEL), EngineReport(64, 0.0), 40)
    engines = (PoolEngine("engine-a", 64), PoolEngine("engine-b", 64))
    pool = _burst(AdmissionCore(WITH_A_MODEL), EngineReport(128, 0.0, engines=engines), 40)
    # the model paces each engine's prefill step; two engines take two such steps at once
    assert 1 < len(lone) < 20
    assert len(pool) == 2 * len(lone)
    # as the router does: the engine with the fewest requests, ties to the first
    assert [d.engine for d in pool[:4]] == ["engine-a", "engine-b", "engine-a", "engine-b"]


def test_the_core_follows_the_engine_the_router_chose() -> None:
    core = AdmissionCore(WITH_A_MODEL)
    engines = (PoolEngine("engine-a", 4), PoolEngine("engine-b", 4))
    core.handle(EngineReport(8, 0.0, engines=engines))
    assert core.handle(Arrival("r1", "a", PRO, 24, 0.0)) == [Admit("r1", 0.0, "engine-a")]
    # the router put r1 on engine-b after all: engine-a is now the emptier one
    core.handle(Routed("r1", "engine-b", 0.05))
    core.handle(FirstToken("r1", 0.05))
    assert core.handle(Arrival("r2", "a", PRO, 24, 0.1)) == [Admit("r2", 0.1, "engine-a")]
    assert core.handle(Arrival("r3", "a", PRO, 24, 0.2)) == [Admit("r3", 0.2, "engine-a")]


def test_requests_go_to_the_smallest_rank_class_first_as_the_router_sends_them() -> None:
    core = AdmissionCore(WITH_A_MODEL)
    engines = (PoolEngine("rank-64", 2, rank=64), PoolEngine("rank-8", 2, rank=8))
    core.handle(EngineReport(4, 0.0, engines=engines))
    decisions = run(core, [Arrival(f"r{i}", "a", PRO, 24, i * 0.1) for i in range(3)])
    # the router fills the rank-8 engine first; with it full the third request waits
    assert [(type(d).__name__, getattr(d, "engine", None)) for d in decisions] == [
        ("Admit", "rank-8"),
        ("Admit", "rank-8"),
        ("Wait", None),
    ]
    assert core.holding() == {"rank-64": 0, "rank-8": 2}


def test_an_engine_that_leaves_the_pool_takes_no_more_and_keeps_its_requests() -> None:
    core = AdmissionCore(WITH_A_MODEL)
    both = (PoolEngine("engine-a", 4), PoolEngine("engine-b", 4))
    core.handle(EngineReport(8, 0.0, engines=both))
    admitted = run(core, [Arrival(f"r{i}", "a", PRO, 24, 0.0) for i in range(2)])
    assert [d.engine for d in admitted if isinstance(d, Admit)] == ["engine-a", "engine-b"]
    core.handle(EngineReport(4, 0.01, engines=(PoolEngine("engine-a", 4),)))
    later = run(
        core,
        [FirstToken("r0", 0.05), FirstToken("r1", 0.05), Arrival("r2", "a", PRO, 24, 0.1)],
    )
    assert later == [Admit("r2", 0.1, "engine-a")]
    assert core.handle(Finished("r1", 0.2)) == []  # engine-b's request ends; nothing breaks
    assert core.in_flight == 2
