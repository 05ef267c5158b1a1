"""Invariants of the policy core under random operation sequences (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loraplex.serving.policy import (
    EMPTY,
    TIER_COSTS,
    AdapterVersion,
    Deferred,
    Evict,
    EvictReason,
    Load,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Request,
    TenantPlan,
    Tier,
)

MB = 1_000_000
NODES = [
    NodeSpec("small", 8, gpu_slots=2, host_slots=3, disk_budget_bytes=40 * MB, max_running=3),
    NodeSpec("mid", 16, gpu_slots=2, host_slots=3, disk_budget_bytes=40 * MB, max_running=3),
    NodeSpec("big", 64, gpu_slots=1, host_slots=2, disk_budget_bytes=70 * MB, max_running=2),
]
RANKS = (8, 8, 16, 16, 64, 8, 16, 64, 8, 16)
VERSIONS = [AdapterVersion(f"v{i}", f"t{i % 3}", rank, rank * MB) for i, rank in enumerate(RANKS)]
PINNED = "v0"

operations = st.lists(
    st.tuples(
        st.sampled_from(["request", "load", "finish", "reconcile", "advance"]),
        st.integers(0, len(VERSIONS) - 1),
    ),
    min_size=1,
    max_size=80,
)


class Harness:
    """Plays the gateway: applies decisions, tracks loads and running requests."""

    def __init__(self, eviction: str) -> None:
        config = PolicyConfig(
            eviction=eviction,
            default_plan=TenantPlan(cold_loads_per_minute=30.0, max_pins=1),
            cold_load_burst=2,
        )
        self.core = PolicyCore(NODES, VERSIONS, TIER_COSTS, config)
        assert self.core.pin(PINNED)
        self.now = 0.0
        self.loads: list[Load] = []
        self.running: list[tuple[str, Request]] = []
        self.next_id = 0

    def step(self, op: str, index: int) -> None:
        if op == "request":
            self.request(VERSIONS[index])
        elif op == "load" and self.loads:
            load = self.loads.pop(index % len(self.loads))
            self.apply(self.core.load_finished(load.node_id, load.version_id, load.tier, self.now))
            self.dispatch(load.node_id)
        elif op == "finish" and self.running:
            node_id, request = self.running.pop(index % len(self.running))
            self.apply(self.core.request_finished(node_id, request, self.now))
            self.dispatch(node_id)
        elif op == "reconcile":
            node = NODES[index % len(NODES)].node_id
            host = self.core.cluster.nodes[node].host
            engine_has = {v for v in host if int(v[1:]) % 2 == index % 2}
            self.apply(self.core.reconcile(node, engine_has, self.now))
        else:
            self.now += 1.0 + index

    def request(self, version: AdapterVersion) -> None:
        request = Request(self.next_id, version.tenant_id, version.version_id, self.now)
        self.next_id += 1
        decision = self.core.route(request, self.now)
        if isinstance(decision, Deferred):
            assert decision.until > self.now
            return
        node = self.core.cluster.nodes[decision.node_id]
        assert node.spec.max_lora_rank >= version.rank, "placed outside its rank class"
        self.apply(list(decision.actions))
        self.dispatch(decision.node_id)

    def apply(self, actions: list[Load | Evict]) -> None:
        for action in actions:
            if isinstance(action, Load):
                self.loads.append(action)
                continue
            if action.reason is EvictReason.CAPACITY:
                node = self.core.cluster.nodes[action.node_id]
                assert action.version_id != PINNED, "evicted a pinned adapter"
                if action.tier is Tier.LOADED:
                    assert action.version_id not in node.inflight, "evicted an in-flight adapter"

    def dispatch(self, node_id: str) -> None:
        for d in self.core.dispatch(node_id, self.now):
            self.running.append((node_id, d.request))

    def check(self) -> None:
        for node in self.core.cluster.nodes.values():
            spec = node.spec
            assert len(node.host) <= spec.host_slots
            assert node.disk.used <= spec.disk_budget_bytes
            assert node.running <= spec.max_running
            resident = [v for v in node.gpu.slots if v is not EMPTY]
            assert len(resident) == len(set(resident)), "a slot double-booked"
            assert all(v in node.host for v in resident), "active without a host copy"
            for version in resident:
                rank = self.core.cluster.versions[str(version)].rank
                assert rank <= spec.max_lora_rank


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, eviction=st.sampled_from(["lru", "gdsf", "dlfu"]))
def test_invariants_hold_after_every_step(ops: list[tuple[str, int]], eviction: str) -> None:
    harness = Harness(eviction)
    for op, index in ops:
        harness.step(op, index)
        harness.check()


@settings(max_examples=150, deadline=None)
@given(ops=operations, eviction=st.sampled_from(["lru", "gdsf", "dlfu"]))
# Found by hypothesis: two rank-64 adapters on a disk that holds one; the second's disk
# load found no room while the first was still arriving and was never retried.
@example(ops=[("request", 4), ("request", 7)], eviction="gdsf")
def test_every_admitted_request_finishes_once_loads_and_requests_complete(
    ops: list[tuple[str, int]], eviction: str
) -> None:
    harness = Harness(eviction)
    for op, index in ops:
        harness.step(op, index)
    for _ in range(500):  # drain: finish loads and requests until nothing is left
        if harness.loads:
            harness.step("load", 0)
        elif harness.running:
            harness.step("finish", 0)
        else:
            break
    for node in harness.core.cluster.nodes.values():
        assert node.load == 0, f"{node.node_id} still holds {node.load} requests"
        assert not node.queue.size
