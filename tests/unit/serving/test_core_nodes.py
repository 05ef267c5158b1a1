"""Engines joining and leaving the policy core while it runs."""

from __future__ import annotations

from loraplex.serving.policy import (
    AdapterVersion,
    LoadCost,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Request,
    Routed,
    TierCosts,
)

COST = LoadCost(0.01, 1e9)
COSTS = TierCosts(COST, COST, COST)


def spec(node_id: str, rank: int = 64) -> NodeSpec:
    """A small node."""
    return NodeSpec(node_id, rank, gpu_slots=1, host_slots=2, disk_budget_bytes=10**6)


def test_a_node_added_later_takes_requests() -> None:
    core = PolicyCore([], [AdapterVersion("v", "t", 8, 100)], COSTS)
    core.add_node(spec("n1"))
    routed = core.route(Request(1, "t", "v", 0.0), 0.0)
    assert isinstance(routed, Routed) and routed.node_id == "n1"


def test_a_removed_node_is_never_chosen_and_forgets_its_copies() -> None:
    core = PolicyCore([spec("n1"), spec("n2")], [AdapterVersion("v", "t", 8, 100)], COSTS)
    first = core.route(Request(1, "t", "v", 0.0), 0.0)
    assert isinstance(first, Routed)
    core.remove_node(first.node_id)
    second = core.route(Request(2, "t", "v", 1.0), 1.0)
    assert isinstance(second, Routed) and second.node_id != first.node_id
    assert first.node_id not in core.cluster.placement_map().get("v", {})


def test_rank_classes_follow_the_nodes_present() -> None:
    core = PolicyCore([spec("small", 16)], [], COSTS)
    core.add_node(spec("big", 64))
    core.remove_node("small")
    assert [c.max_lora_rank for c in core.cluster.classes] == [64]


def test_a_round_robin_core_sends_an_adapters_requests_to_each_engine_in_turn() -> None:
    """The simulator's plain way: a balancer that ignores where the adapter is."""
    versions = [AdapterVersion("v", "t", 8, 100), AdapterVersion("big", "t", 64, 100)]
    nodes = [spec("a"), spec("b"), spec("small", 16)]
    core = PolicyCore(nodes, versions, COSTS, PolicyConfig(round_robin=True))
    sent = []
    for i in range(6):
        routed = core.route(Request(i, "t", "v" if i < 4 else "big", float(i)), float(i))
        assert isinstance(routed, Routed)
        sent.append(routed.node_id)
    assert sent[:4] == ["a", "b", "small", "a"]  # every engine whose rank fits, in turn
    assert "small" not in sent[4:]  # a rank-64 adapter never goes to a rank-16 engine
