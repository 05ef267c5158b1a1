"""PolicyCore decisions on a small cluster: placement, budgets, prefetch, pins, reconcile."""

from __future__ import annotations

from loraplex.serving.policy import (
    TIER_COSTS,
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
