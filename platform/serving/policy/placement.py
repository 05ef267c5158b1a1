"""Rank-aware placement: which node serves a request for an adapter version."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from .cluster import ClusterState
from .model import AdapterVersion, NodeId, Tier, VersionId
from .node import NodeState

# Fresh placements look at this many hashed nodes per rank class rather than all of them:
# the power of two choices balances load nearly as well as a full scan, stays O(1) per
# request at 100+ engines, and hashing makes a returning adapter pick the same nodes, where
# its disk copy probably still is.
CHOICES_PER_CLASS = 2
SCAN_CLASS_BELOW = 5  # small classes are cheap to scan in full


@dataclass(frozen=True, slots=True)
class PlacementRules:
    """The knobs of placement."""

    rank_aware: bool = True
    max_replicas: int = 2
    spread: bool = True  # among engines holding it in memory, one where it starts now


_Score = tuple[bool, bool, int, int, int]


def _first(item: tuple[_Score, NodeState]) -> _Score:
    return item[0]


class Placer:
    """Chooses a node: fits the rank; then not overloaded; then the highest tier there;
    then the smallest rank class; then the least load.

    Tier comes before class for nodes that already hold the adapter: moving a resident
    adapter to a smaller class costs loads it does not need. For fresh placements the
    smallest class wins unless all its candidates are overloaded (then it spills up).
    """

    def __init__(self, cluster: ClusterState, rules: PlacementRules) -> None:
        self.cluster = cluster
        self.rules = rules
        self._class_index: dict[NodeId, int] = {}
        self._fresh: dict[VersionId, tuple[NodeId, ...]] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the rank classes after nodes joined or left."""
        self._class_index = {
            node_id: index
            for index, rank_class in enumerate(self.cluster.classes)
            for node_id in rank_class.node_ids
        }
        self._fresh.clear()

    def choose(self, version: AdapterVersion) -> tuple[NodeState, Tier]:
        """The node to send a request to, and the tier the adapter has (or will have) there."""
        vid = version.version_id
        barred = self.cluster.barred.get(vid, set())
        holders = [
            n
            for n in self.cluster.holders(vid)
            if n.spec.fits(version.rank) and n.node_id not in barred
        ]
        scored = [(self._score(n, vid), n) for n in holders]
        best = max(scored, key=_first, default=None)
        if best is not None and best[0][0] and best[0][2] >= Tier.LOADED:
            return best[1], Tier(best[0][2])  # fast path: resident on a node with room
        resident = sum(1 for key, _ in scored if key[2] >= Tier.LOADED)
        if resident < self.rules.max_replicas:
            held = {n.node_id for n in holders}
            nodes = self.cluster.nodes
            scored += [
                (self._score(nodes[i], vid), nodes[i])
                for i in self._fresh_candidates(version)
                if i not in held and i not in barred
            ]
        if not scored:  # every fresh candidate is barred: any other node that fits
            scored = [
                (self._score(n, vid), n)
                for n in self.cluster.nodes.values()
                if n.spec.fits(version.rank) and n.node_id not in barred
            ]
        key, node = max(scored, key=_first)
        return node, Tier(key[2])

    def best_holder(self, version: VersionId) -> NodeState | None:
        """The node where the version is closest to the GPU (then least loaded), if any."""
        barred = self.cluster.barred.get(version, set())
        holders = [n for n in self.cluster.holders(version) if n.node_id not in barred]
        if not holders:
            return None
        return max(holders, key=lambda n: (n.reach(version), -n.load))

    def _score(self, node: NodeState, version: VersionId) -> _Score:
        class_rank = -self._class_index[node.node_id] if self.rules.rank_aware else 0
        starts_now = (
            self.rules.spread
            and node.tier_of(version) >= Tier.LOADED  # in memory now, not on its way
            and node.starts_now(version)
        )
        return (not node.is_overloaded(), starts_now, node.reach(version), class_rank, -node.load)

    def _fresh_candidates(self, version: AdapterVersion) -> tuple[NodeId, ...]:
        cached = self._fresh.get(version.version_id)
        if cached is not None:
            return cached
        picked: list[NodeId] = []
        key = version.version_id.encode()
        for rank_class in self.cluster.classes:
            if rank_class.max_lora_rank < version.rank:
                continue  # never place an adapter where its rank does not fit
            ids = rank_class.node_ids
            if len(ids) < SCAN_CLASS_BELOW:
                picked.extend(ids)
                continue
            for salt in range(CHOICES_PER_CLASS):
                picked.append(ids[zlib.crc32(key, salt) % len(ids)])
        if not picked:
            raise ValueError(f"no engine can serve rank {version.rank}")
        self._fresh[version.version_id] = result = tuple(dict.fromkeys(picked))
        return result


class RoundRobinPlacer(Placer):
    """What a plain load balancer in front of the engines does: each request goes to the
    next engine in turn that can serve its rank, wherever the adapter is. The simulator's
    model of the plain way (a round-robin proxy before SGLang), never the gateway's."""

    def __init__(self, cluster: ClusterState, rules: PlacementRules) -> None:
        super().__init__(cluster, rules)
        self._turn = 0

    def choose(self, version: AdapterVersion) -> tuple[NodeState, Tier]:
        """The next node in turn whose rank fits."""
        nodes = [n for n in self.cluster.nodes.values() if n.spec.fits(version.rank)]
        if not nodes:
            raise ValueError(f"no engine can serve rank {version.rank}")
        node = nodes[self._turn % len(nodes)]
        self._turn += 1
        return node, node.reach(version.version_id)
