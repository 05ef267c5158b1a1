"""The scenarios `loraplex simulate` knows: clusters, workloads and the policies compared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loraplex.serving.policy import NodeSpec, PolicyConfig, TenantPlan
from loraplex.serving.simulator import costs
from loraplex.serving.simulator.loop import Gating, simulate
from loraplex.serving.simulator.workload import SCAN_TENANT, WorkloadSpec, generate

MAX_RANK = 64
GB = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """Engines and their capacities."""

    engines: int = 4
    gpu_slots: int = 8
    host_slots: int = 32
    disk_budget_bytes: int = 20 * GB


# The baseline is SGLang as it ships: LRU in every tier and no per-tenant budget
# (docs/engines.md §4.4).
LRU = PolicyConfig(eviction="lru", default_plan=TenantPlan(cold_loads_per_minute=None))
DEFAULT = PolicyConfig()
# The default before decayed LFU (eviction.py), kept to show what replacing it changed.
GDSF = replace(DEFAULT, eviction="gdsf")
BELADY = PolicyConfig(eviction="belady", default_plan=TenantPlan(cold_loads_per_minute=None))
LRU_NAME = "lru"
GDSF_NAME = "gdsf+budget (old default)"
DEFAULT_NAME = f"default ({DEFAULT.eviction}+budget)"
# Belady's eviction inside the real system: an oracle heuristic, not a bound (bound.py).
BELADY_NAME = "belady (oracle)"
COMPARED: tuple[tuple[str, PolicyConfig], ...] = (
    (LRU_NAME, LRU),
    (GDSF_NAME, GDSF),
    (DEFAULT_NAME, DEFAULT),
    (BELADY_NAME, BELADY),
)
# Shifting: the popularity ranking rotates by a tenth of the adapters this often, so over
# the default trace (~2,500 s) no adapter comes back to the head it left.
SHIFT_EVERY_S = 300.0
SHIFT_FRACTION = 10
# The scan also shows the default without containment, so the table isolates its effect.
UNCONTAINED_NAME = "default, no containment"
UNCONTAINED = replace(DEFAULT, contain_over_budget=False)
BLIND = "rank-blind (all r64)"
AWARE = "rank-aware (r8,r16,r64x2)"


def uniform_nodes(shape: ClusterShape, max_rank: int = MAX_RANK) -> list[NodeSpec]:
    """Every engine in one rank class: rank-blind provisioning."""
    return [
        NodeSpec(
            f"e{i}",
            max_rank,
            shape.gpu_slots,
            shape.host_slots,
            shape.disk_budget_bytes,
            costs.MAX_RUNNING,
        )
        for i in range(shape.engines)
    ]


def rank_class_nodes(shape: ClusterShape, ranks: tuple[int, ...]) -> list[NodeSpec]:
    """Engines in rank classes with the slot memory of `gpu_slots` rank-64 slots each.

    SGLang pads every slot to max_lora_rank (docs/engines.md §4.2), so the same memory
    holds 8x the slots in a rank-8 class.
    """
    nodes = []
    for i in range(shape.engines):
        rank = ranks[i % len(ranks)]
        slots = shape.gpu_slots * MAX_RANK // rank
        host = max(shape.host_slots, slots)  # SGLang: max-loaded-loras >= max-loras-per-batch
        nodes.append(
            NodeSpec(f"e{i}", rank, slots, host, shape.disk_budget_bytes, costs.MAX_RUNNING)
        )
    return nodes


def _compare(
    spec: WorkloadSpec, nodes: list[NodeSpec], rows: tuple[tuple[str, PolicyConfig], ...]
) -> list[dict[str, Any]]:
    workload = generate(spec)
    return [simulate(name, workload, nodes, config) for name, config in rows]


def stationary(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """Zipf popularity, no shifts: default versus LRU versus Belady."""
    return _compare(spec, uniform_nodes(shape), COMPARED)


def shifting(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """Zipf popularity that drifts: every SHIFT_EVERY_S the hot set moves on.

    At each shift the top tenth of the ranking falls to the tail and every other adapter
    moves up a tenth, so adapters that were hot stop being asked for: pure frequency keeps
    them and loses.
    """
    regular = spec.adapters - spec.scan_adapters
    spec = replace(
        spec,
        shift_every_s=spec.shift_every_s or SHIFT_EVERY_S,
        shift_rotate=spec.shift_rotate or max(1, regular // SHIFT_FRACTION),
    )
    return _compare(spec, uniform_nodes(shape), COMPARED)


def scan(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """Zipf plus one tenant scanning rarely used adapters; also each policy without it."""
    spec = replace(spec, scan_adapters=spec.scan_adapters or 300)
    workload = generate(spec)
    quiet = workload.without_tenant(SCAN_TENANT)
    nodes = uniform_nodes(shape)
    rows = []
    for name, config in (*COMPARED[:3], (UNCONTAINED_NAME, UNCONTAINED), *COMPARED[3:]):
        with_scan = simulate(name, workload, nodes, config)
        without = simulate(name, quiet, nodes, config)
        rows.append(_with_quiet_run(with_scan, without))
    return rows


def _with_quiet_run(with_scan: dict[str, Any], without: dict[str, Any]) -> dict[str, Any]:
    """The scan row, plus what the other tenants got in the same policy's quiet run.

    The scan targets (targets.py) compare the two: what the scanner costs everyone else.
    """
    with_scan["others_p99_without_scanner_s"] = without["others_ttft_p99_s"]
    with_scan["others_p99_ratio"] = with_scan["others_ttft_p99_s"] / without["others_ttft_p99_s"]
    with_scan["others_cold_loads_without_scanner"] = without["others_cold_loads"]
    with_scan["others_slo_misses_without_scanner"] = without["others_slo_misses"]
    return with_scan


def rank_aware(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """Same mix and slot memory: every engine at rank 64 versus rank classes {8, 16, 64}."""
    workload = generate(spec)
    blind = simulate(BLIND, workload, uniform_nodes(shape), replace(DEFAULT, rank_aware=False))
    aware = simulate(AWARE, workload, rank_class_nodes(shape, (8, 16, 64, 64)), DEFAULT)
    return [blind, aware]


def scale(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """The default policy alone on a large cluster; the row's wall_s is the point."""
    return _compare(spec, uniform_nodes(shape), ((DEFAULT_NAME, DEFAULT),))


# Loads ahead of need (policy/core.py prefetch and warm), each against the policy without it.
AT_ADMISSION = "default, load when admitted"
ON_ARRIVAL = "default, load on arrival"
NO_WARM = "default, fetch on first request"
WARM = "default, warm at upload"
UPLOAD_LEAD_S = 60.0  # a version is uploaded this long before its first request


def gated(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """Admission in front of the engines (places = what the engines run at once), load
    near capacity so requests queue at the gate: a cold adapter's load starts when its
    request is admitted, or as soon as it arrives (`PolicyCore.prefetch`)."""
    workload = generate(spec)
    nodes = uniform_nodes(shape)
    gate = Gating(places=sum(n.gpu_slots for n in nodes))  # admission: places from slots
    before = replace(DEFAULT, load_on_arrival=False)
    return [
        simulate(AT_ADMISSION, workload, nodes, before, gate),
        simulate(ON_ARRIVAL, workload, nodes, DEFAULT, gate),
    ]


def uploads(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """Every version is uploaded UPLOAD_LEAD_S before its first request: that request
    downloads it, or finds it on a disk of its rank class (`PolicyCore.warm`)."""
    workload = generate(spec)
    nodes = rank_class_nodes(shape, (8, 16, 64, 64))
    gate = Gating(upload_lead_s=UPLOAD_LEAD_S)
    before = replace(DEFAULT, warm_on_upload=False)
    return [
        simulate(NO_WARM, workload, nodes, before, gate),
        simulate(WARM, workload, nodes, DEFAULT, gate),
    ]


# A request whose adapter waits for a GPU slot copies it to an engine with one free
# (policy/core.py `_spread`), each against the policy without it.
NO_SPREAD = "default, one engine per adapter"
SPREAD = "default, spread for slots"


def spread(spec: WorkloadSpec, shape: ClusterShape) -> list[dict[str, Any]]:
    """Every engine in one rank class: an adapter stays on the engine that loaded it, and
    waits there for a GPU slot while another engine has one free; or a copy goes there."""
    workload = generate(spec)
    nodes = uniform_nodes(shape)
    return [
        simulate(NO_SPREAD, workload, nodes, replace(DEFAULT, spread_for_slots=False)),
        simulate(SPREAD, workload, nodes, DEFAULT),
    ]


Scenario = Callable[[WorkloadSpec, ClusterShape], list[dict[str, Any]]]
SCENARIOS: dict[str, Scenario] = {
    "stationary": stationary,
    "shifting": shifting,
    "scan": scan,
    "rank-aware": rank_aware,
    "scale": scale,
    "gated": gated,
    "uploads": uploads,
    "spread": spread,
}
