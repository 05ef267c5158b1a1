"""Cluster-wide state: nodes, rank classes, adapter versions, where each one is, heat, pins."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .dispatch import DispatchQueue
from .eviction import EvictionPolicy
from .model import (
    AdapterVersion,
    NodeId,
    NodeSpec,
    TenantId,
    VersionId,
)
from .node import NodeState

PolicyMaker = Callable[[], EvictionPolicy]


@dataclass(frozen=True, slots=True)
class RankClass:
    """Engines sharing one `max_lora_rank`; slots there are sized for it."""

    max_lora_rank: int
    node_ids: tuple[NodeId, ...]


class ClusterState:
    """Everything placement needs, indexed so a routing decision touches O(replicas) nodes."""

    def __init__(
        self,
        specs: Iterable[NodeSpec],
        make_policy: PolicyMaker,
        make_queue: Callable[[], DispatchQueue],
        heat_half_life_s: float,
    ) -> None:
        self.versions: dict[VersionId, AdapterVersion] = {}
        self._make_policy, self._make_queue = make_policy, make_queue
        self.nodes: dict[NodeId, NodeState] = {}
        for spec in specs:
            self.nodes[spec.node_id] = self._new_node(spec)
        self.classes: tuple[RankClass, ...] = ()
        self._group_classes()
        self.locations: dict[VersionId, set[NodeId]] = {}  # nodes with any copy or load
        self.pinned: set[VersionId] = set()
        # Nodes a version must not be served from (their probes gave other answers).
        self.barred: dict[VersionId, set[NodeId]] = {}
        self._heat: dict[VersionId, tuple[float, float]] = {}
        self._decay_per_s = math.log(2) / heat_half_life_s

    def add_node(self, spec: NodeSpec) -> NodeState:
        """A node joined (the live gateway's engines come and go); it starts empty."""
        node = self.nodes[spec.node_id] = self._new_node(spec)
        self._group_classes()
        return node

    def remove_node(self, node_id: NodeId) -> NodeState | None:
        """A node left; every copy it held is forgotten with it."""
        node = self.nodes.pop(node_id, None)
        if node is None:
            return None
        for version in [v for v, holders in self.locations.items() if node_id in holders]:
            holders = self.locations[version]
            holders.discard(node_id)
            if not holders:
                del self.locations[version]
        self._group_classes()
        return node

    def _new_node(self, spec: NodeSpec) -> NodeState:
        make = self._make_policy
        return NodeState(spec, make(), make(), self._make_queue(), self.owner)

    def _group_classes(self) -> None:
        by_rank: dict[int, list[NodeId]] = {}
        for node in self.nodes.values():
            by_rank.setdefault(node.spec.max_lora_rank, []).append(node.node_id)
        self.classes = tuple(RankClass(rank, tuple(ids)) for rank, ids in sorted(by_rank.items()))

    def add_version(self, version: AdapterVersion) -> None:
        """Register a version placement may be asked about."""
        self.versions[version.version_id] = version

    def is_barred(self, version: VersionId, node_id: NodeId) -> bool:
        """Whether requests for `version` must not go to the node."""
        return node_id in self.barred.get(version, ())

    def servable(self, version: AdapterVersion) -> bool:
        """Whether some node fits the version's rank and is not barred from it."""
        return any(
            node.spec.fits(version.rank) and not self.is_barred(version.version_id, node_id)
            for node_id, node in self.nodes.items()
        )

    def owner(self, version: VersionId) -> TenantId:
        """The tenant a version belongs to."""
        return self.versions[version].tenant_id

    def bump_heat(self, version: VersionId, now: float) -> float:
        """Count one request in the exponentially decayed heat; returns the new heat."""
        heat = self.heat(version, now) + 1.0
        self._heat[version] = (heat, now)
        return heat

    def heat(self, version: VersionId, now: float) -> float:
        """Requests per half-life, decayed to `now`."""
        value, at = self._heat.get(version, (0.0, now))
        if now <= at:
            return value
        return value * math.exp(-(now - at) * self._decay_per_s)

    def note_location(self, node: NodeState, version: VersionId) -> None:
        """Refresh the index after `version` entered or left a tier of `node`."""
        present = version in node.disk or version in node.host or version in node.pending
        holders = self.locations.get(version)
        if present:
            if holders is None:
                holders = self.locations[version] = set()
            holders.add(node.node_id)
        elif holders is not None:
            holders.discard(node.node_id)
            if not holders:
                del self.locations[version]

    def holders(self, version: VersionId) -> Iterable[NodeState]:
        """Nodes where the version is on disk, loaded, active or on its way."""
        return (self.nodes[node_id] for node_id in self.locations.get(version, ()))

    def placement_map(self) -> dict[VersionId, dict[NodeId, str]]:
        """Each version's tier per node, for the API's cluster view."""
        return {
            version: {node.node_id: node.tier_of(version).name.lower() for node in nodes}
            for version, nodes in ((v, list(self.holders(v))) for v in self.locations)
        }
