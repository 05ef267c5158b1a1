"""PolicyCore decisions on a small cluster: placement, budgets, prefetch, pins, reconcile."""

from __future__ import annotations

from collections.abc import Iterable

from loraplex.serving.policy import (
    TIER_COSTS,
    Action,
    AdapterVersion,
    Deferred,
    Load,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Rejected,
    Request,
    Routed,
    TenantPlan,
    Tier,
)

MB = 1_000_000
NODES = [
    NodeSpec("r8", 8, gpu_slots=2, host_slots=2, disk_budget_bytes=100 * MB),
    NodeSpec("r64", 64, gpu_slots=2, host_slots=2, disk_budget_bytes=100 * MB),
]


def core(plan: TenantPlan | None = None, *versions: AdapterVersion) -> PolicyCore:
    config = PolicyConfig(default_plan=plan or TenantPlan())
    return PolicyCore(NODES, versions, TIER_COSTS, config)


def v(name: str, rank: int = 8, tenant: str = "t") -> AdapterVersion:
    return AdapterVersion(name, tenant, rank, rank * MB)


def route(c: PolicyCore, rid: int, version: str, now: float = 0.0) -> Routed | Deferred | Rejected:
    tenant = c.cluster.versions[version].tenant_id
    return c.route(Request(rid, tenant, version, now), now)


def finish_loads(c: PolicyCore, routed: Routed | Deferred | Rejected, now: float = 0.0) -> None:
    assert isinstance(routed, Routed)
    pending = [a for a in routed.actions if isinstance(a, Load)]
    while pending:
        load = pending.pop()
        more = c.load_finished(load.node_id, load.version_id, load.tier, now)
        pending += [a for a in more if isinstance(a, Load)]


def test_a_small_rank_adapter_goes_to_the_smallest_class() -> None:
    c = core(None, v("small", 8))
    routed = route(c, 1, "small")
    assert isinstance(routed, Routed) and routed.node_id == "r8"


def test_a_large_rank_adapter_never_lands_in_a_small_class() -> None:
    c = core(None, v("large", 64))
    routed = route(c, 1, "large")
    assert isinstance(routed, Routed) and routed.node_id == "r64"


def test_a_cold_request_loads_to_disk_then_to_host() -> None:
    c = core(None, v("a"))
    routed = route(c, 1, "a")
    assert isinstance(routed, Routed) and routed.found is Tier.COLD
    assert [(a.tier) for a in routed.actions if isinstance(a, Load)] == [Tier.DISK]
    follow = c.load_finished("r8", "a", Tier.DISK, 1.0)
    assert [a.tier for a in follow if isinstance(a, Load)] == [Tier.LOADED]


def test_a_loaded_adapter_is_served_where_it_is() -> None:
    c = core(None, v("a"))
    finish_loads(c, route(c, 1, "a"))
    again = route(c, 2, "a")
    assert isinstance(again, Routed) and again.found is Tier.LOADED and not again.actions


def test_over_budget_cold_requests_are_deferred() -> None:
    c = core(TenantPlan(cold_loads_per_minute=60.0), *(v(f"s{i}") for i in range(30)))
    outcomes = [route(c, i, f"s{i}") for i in range(30)]
    assert any(isinstance(o, Deferred) for o in outcomes)


def test_requests_too_far_over_budget_are_refused_with_a_retry_time() -> None:
    c = core(TenantPlan(cold_loads_per_minute=1.0), *(v(f"s{i}") for i in range(30)))
    outcomes = [route(c, i, f"s{i}") for i in range(30)]
    refused = [o for o in outcomes if isinstance(o, Rejected)]
    assert refused and all(o.retry_after_s > c.config.max_defer_s for o in refused)


def test_promote_prefetches_the_new_version_where_the_old_one_is_loaded() -> None:
    c = core(None, v("old"), v("new"))
    finish_loads(c, route(c, 1, "old"))
    actions = c.promote("old", "new", 0.0)
    assert [(a.node_id, a.version_id) for a in actions if isinstance(a, Load)] == [("r8", "new")]


def test_pins_are_limited_by_the_plan() -> None:
    c = core(TenantPlan(max_pins=1), v("a"), v("b"))
    assert c.pin("a")
    assert not c.pin("b")


def test_reconcile_adopts_what_the_engine_loaded_by_itself() -> None:
    c = core(None, v("a"))
    c.reconcile("r8", {"a"}, 0.0)
    assert c.cluster.nodes["r8"].tier_of("a") is Tier.LOADED


def test_reconcile_forgets_what_the_engine_dropped() -> None:
    c = core(None, v("a"))
    finish_loads(c, route(c, 1, "a"))
    for d in c.dispatch("r8", 0.0):
        c.request_finished("r8", d.request, 1.0)
    c.reconcile("r8", set(), 2.0)
    assert c.cluster.nodes["r8"].tier_of("a") is Tier.DISK


def loads(actions: Iterable[Action]) -> list[tuple[str, str, Tier]]:
    return [(a.node_id, a.version_id, a.tier) for a in actions if isinstance(a, Load)]


def restored(c: PolicyCore, node_id: str, versions: set[str]) -> None:
    """The node holds `versions` in memory, every load finished."""
    pending = c.restore(node_id, versions, 0.0)
    while pending:
        at, version, tier = loads(pending)[0]
        pending = pending[1:] + c.load_finished(at, version, tier, 0.0)


def test_an_adapter_waiting_for_a_slot_is_copied_where_one_is_free_and_served_there() -> None:
    """Two engines of one rank class with one GPU slot each. Engine x holds "a" and "b" in
    memory and a request of "a" runs in its slot: a request of "b" waits there, so "b" is
    loaded onto y too, and the next request of "b" goes to y, where it starts at once."""
    nodes = [NodeSpec(n, 64, gpu_slots=1, host_slots=2, disk_budget_bytes=100 * MB) for n in "xy"]
    c = PolicyCore(nodes, [v("a"), v("b")], TIER_COSTS, PolicyConfig())
    restored(c, "x", {"a", "b"})
    assert isinstance(route(c, 1, "a"), Routed)
    assert [d.request.request_id for d in c.dispatch("x", 0.0)] == [1]
    waiting = route(c, 2, "b")
    assert isinstance(waiting, Routed) and waiting.node_id == "x"
    assert loads(waiting.actions) == [("y", "b", Tier.DISK)]
    finish_loads(c, waiting)
    assert c.cluster.nodes["y"].tier_of("b") is Tier.LOADED
    after = route(c, 3, "b")
    assert isinstance(after, Routed) and after.node_id == "y" and not after.actions


def test_no_copy_is_made_where_the_adapter_starts_at_once() -> None:
    nodes = [NodeSpec(n, 64, gpu_slots=1, host_slots=2, disk_budget_bytes=100 * MB) for n in "xy"]
    c = PolicyCore(nodes, [v("a")], TIER_COSTS, PolicyConfig())
    finish_loads(c, first := route(c, 1, "a"))
    assert isinstance(first, Routed)
    c.dispatch(first.node_id, 0.0)  # "a" holds the slot: its next request joins it
    again = route(c, 2, "a")
    assert isinstance(again, Routed) and again.node_id == first.node_id and not again.actions


def test_of_two_engines_holding_an_adapter_the_one_where_it_starts_now_wins_over_less_load() -> (
    None
):
    """p's only GPU slot runs "b"; q runs two requests of "c" and has a slot free: "a",
    in memory on both, goes to q, the busier engine of the larger rank class, because it
    starts there at once."""
    nodes = [
        NodeSpec("p", 16, gpu_slots=1, host_slots=3, disk_budget_bytes=100 * MB),
        NodeSpec("q", 64, gpu_slots=2, host_slots=3, disk_budget_bytes=100 * MB),
    ]
    c = PolicyCore(nodes, [v("a"), v("b"), v("c")], TIER_COSTS, PolicyConfig())
    for node_id in ("p", "q"):
        restored(c, node_id, {"a", "b", "c"})
    for rid, version, node_id in ((1, "b", "p"), (2, "c", "q"), (3, "c", "q")):
        routed = route(c, rid, version)
        assert isinstance(routed, Routed) and routed.node_id == node_id
        assert [d.request.request_id for d in c.dispatch(node_id, 0.0)] == [rid]
    chosen = route(c, 4, "a")
    assert isinstance(chosen, Routed) and chosen.node_id == "q" and not chosen.actions


def test_a_copy_on_its_way_is_not_started_again_nor_a_third_one() -> None:
    """While "b"'s copy downloads to y, more requests of "b" waiting on x start nothing."""
    nodes = [NodeSpec(n, 64, gpu_slots=1, host_slots=2, disk_budget_bytes=100 * MB) for n in "xyz"]
    c = PolicyCore(nodes, [v("a"), v("b")], TIER_COSTS, PolicyConfig())
    restored(c, "x", {"a", "b"})
    assert isinstance(route(c, 1, "a"), Routed)
    c.dispatch("x", 0.0)
    first = route(c, 2, "b")
    assert isinstance(first, Routed) and len(loads(first.actions)) == 1
    for rid in (3, 4):
        again = route(c, rid, "b")
        assert isinstance(again, Routed) and again.node_id == "x" and not loads(again.actions)
