"""Starting loads: making room in a tier by the eviction policy, then reserving it."""

from __future__ import annotations

from collections.abc import Callable, Collection

from .actions import Action, Evict, EvictReason, Load
from .cluster import ClusterState
from .model import TenantId, Tier, TierCosts, VersionId
from .node import NodeState

BYTES_PER_MB = 1_000_000
OverBudget = Callable[[float], Collection[TenantId]]
MostlyMisses = Callable[[TenantId], bool]


def no_tenants(_: float) -> Collection[TenantId]:
    """An OverBudget that contains nobody: containment switched off."""
    return ()


def never(_: TenantId) -> bool:
    """A MostlyMisses that names nobody: every contained tenant may grow."""
    return False


class Loader:
    """Plans loads into `disk` and `loaded`; values entries for cost-aware eviction."""

    def __init__(
        self,
        cluster: ClusterState,
        costs: TierCosts,
        over_budget: OverBudget = no_tenants,
        mostly_misses: MostlyMisses = never,
    ) -> None:
        self.cluster = cluster
        self.costs = costs
        self.over_budget = over_budget  # tenants whose entries go first (cache.py)
        self.mostly_misses = mostly_misses  # of those, the ones that may not grow (reuse.py)

    def value(self, node: NodeState, version: VersionId, tier: Tier, now: float) -> float:
        """Heat x reload cost / size: what keeping this entry saves per unit of capacity.

        Host entries are one slot each; their reload cost includes the object-store fetch
        when the disk copy is gone, so an adapter only in memory is worth more there. On
        disk the reload cost is in seconds, or one load whatever the size when the disk's
        policy counts loads (`disk_value`, eviction.py): heat per MB.
        """
        spec = self.cluster.versions[version]
        heat: float = self.cluster.heat(version, now)
        if tier is Tier.LOADED:
            below = Tier.DISK if version in node.disk else Tier.COLD
            return heat * self.costs.reload_seconds(spec.size_bytes, Tier.LOADED, below)
        size_mb: float = max(spec.size_bytes / BYTES_PER_MB, 1e-6)
        if node.disk.policy.disk_value == "loads":
            return heat / size_mb
        cost = self.costs.reload_seconds(spec.size_bytes, Tier.DISK, Tier.COLD)
        return heat * cost / size_mb

    def ensure_loading(self, node: NodeState, version: VersionId, now: float) -> list[Action]:
        """Start the next load that brings `version` towards host memory on `node`."""
        if version in node.pending or version in node.host:
            return []
        if version in node.disk:
            return self.start(node, version, Tier.LOADED, now)
        return self.start(node, version, Tier.DISK, now)

    def start(self, node: NodeState, version: VersionId, tier: Tier, now: float) -> list[Action]:
        """Make room and reserve it; a load that cannot find room waits in `blocked`.

        Room is held by in-flight requests (host) or by loads still in progress (disk, and
        host entries being filled); `retry_blocked` runs when either finishes.
        """
        cache = node.host if tier is Tier.LOADED else node.disk
        spec = self.cluster.versions[version]
        size = 1 if tier is Tier.LOADED else spec.size_bytes
        pinned = self.cluster.pinned
        contained = self.over_budget(now)
        if tier is Tier.LOADED:
            evictable = lambda v: node.host_evictable(v, pinned)  # noqa: E731
        else:
            evictable = lambda v: node.disk_evictable(v, pinned)  # noqa: E731
        tenant = spec.tenant_id
        grow = tenant not in contained or not self.mostly_misses(tenant)
        victims, fits = cache.make_room(size, evictable, contained, tenant, grow=grow)
        actions: list[Action] = [self.evicted(node, v, tier, EvictReason.CAPACITY) for v in victims]
        if not fits:
            if (version, tier) not in node.blocked:
                node.blocked.append((version, tier))
            return actions
        cache.insert(version, size, self.value(node, version, tier, now), now)
        node.pending[version] = tier
        self.cluster.note_location(node, version)
        actions.append(Load(node.node_id, version, tier, spec.size_bytes))
        return actions

    def evicted(
        self, node: NodeState, version: VersionId, tier: Tier, reason: EvictReason
    ) -> Evict:
        """Finish an eviction the cache already made: GPU slot, index, the decision."""
        if tier is Tier.LOADED and node.gpu.drop(version):
            node.queue.set_active(version, False)
        self.cluster.note_location(node, version)
        return Evict(node.node_id, version, tier, reason)

    def retry_blocked(self, node: NodeState, now: float) -> list[Action]:
        """Retry loads that found no room, oldest first, until one still does not fit."""
        actions: list[Action] = []
        while node.blocked:
            version, tier = entry = node.blocked.popleft()
            if version not in node.waiting and version not in node.want_loaded:
                continue  # nobody needs it any more
            if version in node.pending or node.reach(version) >= tier:
                continue  # already on its way by another path
            actions.extend(self.start(node, version, tier, now))
            if entry in node.blocked:
                node.blocked.rotate(1)  # back to the front: keep the order
                break
        return actions
