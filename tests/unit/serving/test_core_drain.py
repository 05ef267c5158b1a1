"""Draining a node: its hot and pinned adapters are loaded elsewhere before it leaves, and
a rank class with no node left spills to a larger one."""

from __future__ import annotations

from loraplex.serving.policy import TIER_COSTS, Load, NodeSpec, PolicyCore, Routed, Tier
from tests.unit.serving.test_core import MB, finish_loads, route, v

NODES = [
    NodeSpec("r16", 16, gpu_slots=2, host_slots=3, disk_budget_bytes=100 * MB),
    NodeSpec("r64", 64, gpu_slots=2, host_slots=3, disk_budget_bytes=100 * MB),
]


def drained_core(*versions: str) -> PolicyCore:
    c = PolicyCore(NODES, [v(name) for name in versions], TIER_COSTS)
    for rid, name in enumerate(versions, 1):
        finish_loads(c, route(c, rid, name))
    return c


def loads(actions: list[object]) -> list[tuple[str, str]]:
    return [(a.node_id, a.version_id) for a in actions if isinstance(a, Load)]


def test_evacuating_a_node_loads_its_hot_adapters_on_a_node_whose_class_fits() -> None:
    c = drained_core("a", "b")
    assert {n.node_id for n in c.cluster.holders("a")} == {"r16"}
    assert sorted(loads(c.evacuate("r16", 1.0))) == [("r64", "a"), ("r64", "b")]


def test_evacuating_puts_pinned_adapters_first() -> None:
    c = drained_core("a", "b", "c")
    c.pin("c", within_plan=False)
    # r64 has room for three: c (pinned) is first whatever its heat.
    assert loads(c.evacuate("r16", 1.0))[0] == ("r64", "c")


def test_evacuating_skips_adapters_already_loaded_elsewhere() -> None:
    c = drained_core("a")
    c.evacuate("r16", 1.0)
    c.load_finished("r64", "a", Tier.DISK, 1.0)
    c.load_finished("r64", "a", Tier.LOADED, 1.0)
    assert loads(c.evacuate("r16", 2.0)) == []


def test_evacuating_never_fills_the_target_past_its_host_slots() -> None:
    c = drained_core("a", "b", "c")
    c.cluster.add_version(v("big", 64))
    finish_loads(c, route(c, 9, "big"))
    moved = loads(c.evacuate("r16", 1.0))
    assert len(moved) == NODES[1].host_slots - 1  # one slot holds `big` already


def test_a_class_with_no_node_left_spills_to_a_larger_class() -> None:
    c = drained_core("a")
    c.remove_node("r16")  # drained: the rank-16 class is empty
    routed = route(c, 10, "a", 2.0)
    assert isinstance(routed, Routed) and routed.node_id == "r64"


def test_once_the_class_is_back_fresh_adapters_go_to_it_again() -> None:
    c = drained_core()
    c.remove_node("r16")
    c.add_node(NODES[0])
    c.cluster.add_version(v("fresh"))
    routed = route(c, 1, "fresh")
    assert isinstance(routed, Routed) and routed.node_id == "r16"
