"""Containment: a tenant over its cold-load budget recycles its own space, not others'."""

from __future__ import annotations

from loraplex.serving.policy import (
    TIER_COSTS,
    AdapterVersion,
    ColdLoadBudget,
    DispatchQueue,
    GdsfPolicy,
    Load,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Request,
    Routed,
    TenantPlan,
    Tier,
)
from loraplex.serving.policy.cache import TierCache

MB = 1_000_000


def owner(version: str) -> str:
    return version.split("/")[0]


def always(_: str) -> bool:
    return True


def test_a_contained_tenant_evicts_its_own_entry_not_anothers_colder_one() -> None:
    cache = TierCache(Tier.LOADED, 2, GdsfPolicy(), owner)
    cache.insert("other/tail", 1, 0.1)  # rarely used: the policy alone would evict it
    cache.insert("scanner/a", 1, 5.0)
    victims, fits = cache.make_room(1, always, contained={"scanner"}, tenant="scanner")
    assert fits and victims == ["scanner/a"]


def test_other_tenants_evict_a_contained_tenants_entries_first() -> None:
    cache = TierCache(Tier.LOADED, 2, GdsfPolicy(), owner)
    cache.insert("other/tail", 1, 0.1)
    cache.insert("scanner/a", 1, 5.0)
    victims, _ = cache.make_room(1, always, contained={"scanner"}, tenant="other")
    assert victims == ["scanner/a"]


def test_a_contained_tenant_with_nothing_evictable_still_gets_room() -> None:
    cache = TierCache(Tier.LOADED, 1, GdsfPolicy(), owner)
    cache.insert("other/tail", 1, 0.1)
    victims, fits = cache.make_room(1, always, contained={"scanner"}, tenant="scanner")
    assert fits and victims == ["other/tail"]


def test_evicting_a_contained_tenants_entry_does_not_age_other_tenants_entries() -> None:
    cache = TierCache(Tier.LOADED, 2, GdsfPolicy(), owner)
    cache.insert("other/hot", 1, 3.0)
    cache.insert("scanner/a", 1, 5.0)  # warmer than the hot entry: a scan comes round often
    cache.make_room(1, always, contained={"scanner"}, tenant="other")
    cache.insert("other/one-off", 1, 1.0)
    victims, _ = cache.make_room(1, always)
    assert victims == ["other/one-off"]


def test_a_tenant_that_may_not_grow_recycles_its_own_entry_before_taking_free_space() -> None:
    cache = TierCache(Tier.LOADED, 4, GdsfPolicy(), owner)
    cache.insert("scanner/a", 1, 5.0)
    victims, fits = cache.make_room(1, always, contained={"scanner"}, tenant="scanner", grow=False)
    assert fits and victims == ["scanner/a"]
    assert cache.free() == 4


def test_a_contained_tenant_that_may_grow_takes_free_space() -> None:
    cache = TierCache(Tier.LOADED, 4, GdsfPolicy(), owner)
    cache.insert("heavy/a", 1, 5.0)
    victims, fits = cache.make_room(1, always, contained={"heavy"}, tenant="heavy")
    assert fits and victims == []


def test_without_containment_the_policy_alone_picks_the_victim() -> None:
    cache = TierCache(Tier.LOADED, 2, GdsfPolicy(), owner)
    cache.insert("other/tail", 1, 0.1)
    cache.insert("scanner/a", 1, 5.0)
    victims, _ = cache.make_room(1, always, tenant="scanner")
    assert victims == ["other/tail"]


def one_load_a_minute(
    versions: list[AdapterVersion], host_slots: int, disk_bytes: int
) -> PolicyCore:
    """One node, and a plan allowing each tenant one cold load a minute with no burst."""
    node = NodeSpec("n", 8, gpu_slots=1, host_slots=host_slots, disk_budget_bytes=disk_bytes)
    plan = TenantPlan(cold_loads_per_minute=1.0)
    config = PolicyConfig(default_plan=plan, cold_load_burst=0, max_defer_s=120.0)
    return PolicyCore([node], versions, TIER_COSTS, config)


def test_a_scanning_tenant_cannot_evict_another_tenants_hot_adapter() -> None:
    versions = [AdapterVersion("hot", "steady", 8, 8 * MB)]
    versions += [AdapterVersion(f"scan{i}", "scanner", 8, 8 * MB) for i in range(6)]
    core = one_load_a_minute(versions, host_slots=2, disk_bytes=16 * MB)
    serve(core, Request(0, "steady", "hot", 0.0), 0.0)
    for i in range(6):  # one load allowed a minute: every later one is over budget
        serve(core, Request(i + 1, "scanner", f"scan{i}", 60.0 * i), 60.0 * i + 1)
    assert core.cluster.nodes["n"].tier_of("hot") >= Tier.LOADED


def test_a_scanning_tenant_over_budget_does_not_fill_a_warming_disk() -> None:
    versions = [AdapterVersion(f"scan{i}", "scanner", 8, 8 * MB) for i in range(6)]
    core = one_load_a_minute(versions, host_slots=4, disk_bytes=80 * MB)
    for i in range(6):  # each load is paid for, but leaves the tenant over budget
        serve(core, Request(i, "scanner", f"scan{i}", 60.0 * i), 60.0 * i + 1)
    state = core.cluster.nodes["n"]
    assert state.disk.used_by("scanner") == 8 * MB  # it recycled one adapter's space
    assert state.host.used_by("scanner") == 1


def test_a_heavy_tenant_over_budget_that_mostly_hits_still_grows() -> None:
    versions = [AdapterVersion(f"a{i}", "heavy", 8, 8 * MB) for i in range(6)]
    core = one_load_a_minute(versions, host_slots=4, disk_bytes=80 * MB)
    rid = 0
    for i in range(6):  # one new adapter a minute, and its hot one asked for in between
        for version in (f"a{i}", "a0", "a0", "a0"):
            at = 60.0 * i + rid % 4
            serve(core, Request(rid, "heavy", version, at), at + 0.5)
            rid += 1
    assert core.cluster.nodes["n"].disk.used_by("heavy") == 6 * 8 * MB


def serve(core: PolicyCore, request: Request, done: float) -> None:
    """Route, finish its loads, run and finish it."""
    routed = core.route(request, request.arrival)
    assert isinstance(routed, Routed)
    loads = list(routed.actions)
    while loads:
        load = loads.pop()
        if isinstance(load, Load):
            loads += core.load_finished(load.node_id, load.version_id, load.tier, done)
    for dispatched in core.dispatch(routed.node_id, done):
        core.request_finished(routed.node_id, dispatched.request, done)


def test_the_budget_names_a_drained_tenant_until_it_refills() -> None:
    budget = ColdLoadBudget(lambda _: 60.0, burst=1)
    budget.reserve("scanner", 0.0)
    budget.reserve("scanner", 0.0)
    assert budget.over_budget(0.0) == {"scanner"}
    assert budget.over_budget(2.0) == frozenset()


def test_a_yielding_tenant_takes_a_free_slot_only_after_others() -> None:
    queue = DispatchQueue(lambda _: 1.0, max_wait_s=10.0)
    queue.push(Request(1, "scanner", "s", 0.0), 0.0)  # earlier tag
    queue.push(Request(2, "steady", "a", 0.0), 0.0)
    assert queue.peek_choice(0.0, True) == "s"
    assert queue.peek_choice(0.0, True, yielding={"scanner"}) == "a"
