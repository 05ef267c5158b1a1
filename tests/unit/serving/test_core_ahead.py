"""Loads ahead of need: a waiting request's adapter fetched on arrival, an upload warmed."""

from __future__ import annotations

from dataclasses import replace

from loraplex.serving.policy import (
    TIER_COSTS,
    AdapterVersion,
    Load,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Request,
    Routed,
    TenantPlan,
    Tier,
)
from loraplex.serving.policy.actions import Action

MB = 1_000_000
NODES = [
    NodeSpec("r8", 8, gpu_slots=2, host_slots=2, disk_budget_bytes=100 * MB),
    NodeSpec("r64", 64, gpu_slots=2, host_slots=2, disk_budget_bytes=100 * MB),
]
SMALL = AdapterVersion("small", "t", 8, 8 * MB)
ONE_COLD_LOAD = PolicyConfig(cold_load_burst=0)  # one now, the next a minute later
PER_MINUTE = TenantPlan(cold_loads_per_minute=1.0)


def core(config: PolicyConfig | None = None, plan: TenantPlan | None = None) -> PolicyCore:
    config = replace(config or PolicyConfig(), default_plan=plan or TenantPlan())
    return PolicyCore(NODES, [SMALL], TIER_COSTS, config)


def loads(actions: list[Action] | tuple[Action, ...]) -> list[tuple[str, Tier]]:
    return [(a.node_id, a.tier) for a in actions if isinstance(a, Load)]


def test_a_request_waiting_for_admission_has_its_adapter_fetched_while_it_waits() -> None:
    c = core()
    waiting = Request(1, "t", "small", 0.0)
    assert loads(c.prefetch(waiting, 0.0)) == [("r8", Tier.DISK)]
    c.load_finished("r8", "small", Tier.DISK, 1.0)  # the fetch ends before its admission
    routed = c.route(waiting, 2.0)
    assert isinstance(routed, Routed) and routed.node_id == "r8"
    assert routed.found is Tier.DISK  # only the engine load is left
    assert loads(routed.actions) == [("r8", Tier.LOADED)]


def test_a_fetch_on_arrival_spends_the_cold_load_budget_once() -> None:
    c = core(ONE_COLD_LOAD, PER_MINUTE)
    waiting = Request(1, "t", "small", 0.0)
    c.prefetch(waiting, 0.0)
    routed = c.route(waiting, 0.0)  # admitted before the fetch ended: not charged again
    assert isinstance(routed, Routed)
    assert c.budget.would_allow("t", 0.0) is False


def test_a_prefetched_request_is_counted_once() -> None:
    c = core()
    waiting = Request(1, "t", "small", 0.0)
    c.prefetch(waiting, 0.0)
    c.route(waiting, 0.0)
    other = core()
    other.route(Request(1, "t", "small", 0.0), 0.0)
    assert c.cluster.heat("small", 0.0) == other.cluster.heat("small", 0.0)


def test_without_load_on_arrival_nothing_is_fetched_before_admission() -> None:
    c = core(PolicyConfig(load_on_arrival=False))
    assert c.prefetch(Request(1, "t", "small", 0.0), 0.0) == []


def test_an_uploaded_version_is_fetched_onto_a_disk_of_its_rank_class_and_into_a_free_slot() -> (
    None
):
    c = core()
    assert loads(c.warm("small", 0.0)) == [("r8", Tier.DISK)]
    # The node has a host slot free: the fetch carries on into the engine's memory.
    assert loads(c.load_finished("r8", "small", Tier.DISK, 1.0)) == [("r8", Tier.LOADED)]
    c.load_finished("r8", "small", Tier.LOADED, 2.0)
    routed = c.route(Request(1, "t", "small", 5.0), 5.0)
    assert isinstance(routed, Routed) and (routed.node_id, routed.found) == ("r8", Tier.LOADED)


def test_warming_takes_no_host_slot_from_a_resident_adapter() -> None:
    others = [AdapterVersion(f"o{i}", "t", 8, MB) for i in range(2)]
    c = PolicyCore(
        NODES, [SMALL, *others], TIER_COSTS, replace(PolicyConfig(), default_plan=TenantPlan())
    )
    for i, other in enumerate(others):  # the rank-8 node's two host slots, both in use
        request = Request(i + 1, "t", other.version_id, 0.0)
        c.route(request, 0.0)
        c.load_finished("r8", other.version_id, Tier.DISK, 0.5)
        c.load_finished("r8", other.version_id, Tier.LOADED, 1.0)
    assert loads(c.warm("small", 2.0)) == [("r8", Tier.DISK)]
    assert loads(c.load_finished("r8", "small", Tier.DISK, 3.0)) == []  # stays on disk
    assert set(c.cluster.nodes["r8"].host) == {"o0", "o1"}
    routed = c.route(Request(9, "t", "small", 5.0), 5.0)
    assert isinstance(routed, Routed) and (routed.node_id, routed.found) == ("r8", Tier.DISK)


def test_warming_is_not_charged_to_the_tenant_and_skipped_over_budget() -> None:
    c = core(ONE_COLD_LOAD, PER_MINUTE)
    c.warm("small", 0.0)
    assert c.budget.would_allow("t", 0.0)  # the warm fetch spent nothing
    spent = core(ONE_COLD_LOAD, PER_MINUTE)
    spent.budget.reserve("t", 0.0)
    assert spent.warm("small", 0.0) == []  # over its budget: nothing fetched for it


def test_without_warm_on_upload_nothing_is_fetched_at_upload() -> None:
    assert core(PolicyConfig(warm_on_upload=False)).warm("small", 0.0) == []
