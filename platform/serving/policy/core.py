"""The policy core: route, load, dispatch and reconcile decisions over one ClusterState."""

from __future__ import annotations

from collections.abc import Iterable

from .actions import (
    Action,
    Deferred,
    Dispatch,
    EvictReason,
    Rejected,
    Routed,
)
from .budget import ColdLoadBudget
from .cluster import ClusterState
from .config import PolicyConfig
from .dispatch import DispatchQueue
from .eviction import NextUse, make_eviction_policy
from .loads import Loader, no_tenants
from .model import (
    AdapterVersion,
    NodeId,
    NodeSpec,
    Request,
    RequestId,
    Tier,
    TierCosts,
    VersionId,
)
from .node import NodeState
from .placement import PlacementRules, Placer, RoundRobinPlacer
from .reuse import TenantReuse


class PolicyCore:
    """Pure decisions: callers pass `now`, apply the returned actions, report what happened.

    A cold load is one that must fetch from the object store (the adapter is on no tier of
    the chosen node); each one spends from the tenant's budget. Over budget, the request is
    served where its adapter already is (any tier, even on a busier node); if it is nowhere
    the request is deferred until the tenant's bucket refills, or refused when that is more
    than `max_defer_s` away. Deferring or refusing (not evicting others) keeps the noisy
    tenant's cost on that tenant: its own requests wait, everyone else's cache stays. A
    tenant over budget is also contained in every tier (cache.py): its entries are evicted
    first, so the loads it is allowed recycle its own space, and if most of its requests
    miss (a scanner, reuse.py) it does not grow into free space either. Disk -> host loads
    are not charged: they are cheap and a normal heavy tenant makes many.
    """

    def __init__(
        self,
        nodes: Iterable[NodeSpec],
        versions: Iterable[AdapterVersion],
        costs: TierCosts,
        config: PolicyConfig | None = None,
        next_use: NextUse | None = None,
    ) -> None:
        self.config = config = config or PolicyConfig()
        self.cluster = ClusterState(
            nodes,
            lambda: make_eviction_policy(config.eviction, next_use),
            lambda: DispatchQueue(
                lambda tenant: config.plan(tenant).weight, config.max_wait_s, config.skip_to_fit
            ),
            config.heat_half_life_s,
        )
        for version in versions:
            self.cluster.add_version(version)
        rules = PlacementRules(config.rank_aware, config.max_replicas, config.spread_for_slots)
        self.placer = (RoundRobinPlacer if config.round_robin else Placer)(self.cluster, rules)
        self._deferred: set[RequestId] = set()
        self._announced: set[RequestId] = set()  # prefetched on arrival, not yet routed
        self.budget = ColdLoadBudget(
            lambda tenant: config.plan(tenant).cold_loads_per_minute, config.cold_load_burst
        )
        contain = self.budget.over_budget if config.contain_over_budget else no_tenants
        self.reuse = TenantReuse(config.heat_half_life_s)
        self.loader = Loader(self.cluster, costs, contain, self.reuse.mostly_misses)

    def route(self, request: Request, now: float) -> Routed | Deferred | Rejected:
        """Send a request to a node, starting whatever loads it needs there."""
        version = self.cluster.versions[request.version_id]
        ticket = request.request_id in self._deferred
        if ticket:
            self._deferred.discard(request.request_id)  # a retry: heat and budget are paid
        elif request.request_id in self._announced:
            self._announced.discard(request.request_id)  # counted when it arrived
        else:
            self._count(request, now)
        node, reach = self.placer.choose(version)
        if reach is Tier.COLD and not ticket:
            if self.budget.would_allow(request.tenant_id, now):
                self.budget.reserve(request.tenant_id, now)
            else:
                holder = self.placer.best_holder(version.version_id)
                if holder is None:
                    return self._hold_back(request, now)
                node, reach = holder, holder.reach(version.version_id)
        found = node.tier_of(version.version_id)
        node.admit(request)
        if reach >= Tier.LOADED and version.version_id not in node.pending:
            # Only the host copy is refreshed; the disk copy keeps the value it was loaded
            # with. Refreshing it on every request kept disk copies of adapters that were in
            # host memory anyway and measured 10-30% more cold loads (dlfu and gdsf alike);
            # refreshing it only when a host load reads it measured no better.
            value = self.loader.value(node, version.version_id, Tier.LOADED, now)
            node.host.touch(version.version_id, value, now)
            node.queue.push(request, now)
            node.queue.set_active(version.version_id, node.gpu.is_active(version.version_id))
            return Routed(node.node_id, found, tuple(self._spread(version, node, now)))
        node.waiting.setdefault(version.version_id, []).append(request)
        actions = self.loader.ensure_loading(node, version.version_id, now)
        return Routed(node.node_id, found, tuple(actions))

    def _spread(self, version: AdapterVersion, node: NodeState, now: float) -> list[Action]:
        """The adapter waits for a GPU slot on `node`: copy it to another engine that fits
        its rank and has a GPU slot free, so its next requests can start there (placement
        prefers the holder where a request starts now). The copy evicts nothing: a host
        load only into a free host slot, a download only into free disk space and on into
        memory only if a host slot is still free then (`warming`, as an upload's warm).
        At most `max_replicas` copies, those on their way counted; like a warm, only for a
        tenant within its cold-load budget and not charged to it. On two engines of one
        rank class this halved the simulator's p99 (`loraplex simulate --scenario spread`)."""
        vid = version.version_id
        if not self.config.spread_for_slots or node.starts_now(vid):
            return []
        barred = self.cluster.barred.get(vid, set())
        copies = sum(
            1
            for n in self.cluster.holders(vid)
            if n.node_id not in barred
            and (n.reach(vid) >= Tier.LOADED or vid in n.warming or vid in n.want_loaded)
        )
        if copies >= self.config.max_replicas:
            return []
        spare = [
            n
            for n in self.cluster.nodes.values()
            if n is not node
            and n.node_id not in barred
            and n.spec.fits(version.rank)
            and vid not in n.pending
            and n.host.free() > 0
            and not n.blocked
            and n.starts_now(vid)
        ]
        target = min(spare, key=lambda n: (-n.tier_of(vid), n.load), default=None)
        if target is None:
            return []
        if target.tier_of(vid) is Tier.DISK:
            return self.loader.start(target, vid, Tier.LOADED, now)
        if version.size_bytes > target.disk.free():
            return []
        if not self.budget.would_allow(version.tenant_id, now):
            return []
        target.warming.add(vid)
        return self.loader.start(target, vid, Tier.DISK, now)

    def prefetch(self, request: Request, now: float) -> list[Action]:
        """A request arrived and waits (for admission) before it is routed: start fetching
        its adapter onto the node `route` would choose now, so the download runs while it
        waits rather than after. It counts (heat, reuse) from now: `route` does not count it
        again; the cold-load budget is spent now too, once. Only the disk copy is made: a
        host slot taken this early would evict adapters requests ahead of it still need."""
        if not self.config.load_on_arrival:
            return []
        version = self.cluster.versions[request.version_id]
        self._count(request, now)
        self._announced.add(request.request_id)
        return self._load_ahead(version, Tier.DISK, now, charge=True)

    def warm(self, version_id: VersionId, now: float) -> list[Action]:
        """A version was uploaded: fetch it onto the disk of one node of the smallest rank
        class that fits it (where its first request will go), so that request pays an
        engine load and no download; where that node has a host slot free, on into its
        memory too, so the first request pays nothing. A free slot only: warming evicts
        nothing a request may need. Only for a tenant within its cold-load budget, and not
        charged to it: a tenant publishing many versions at once would otherwise have its
        first requests deferred for fetches made on its behalf (measured: `loraplex
        simulate --scenario uploads` deferred 48 requests when warming was charged)."""
        if not self.config.warm_on_upload:
            return []
        version = self.cluster.versions[version_id]
        node, reach = self.placer.choose(version)
        if reach >= Tier.LOADED:
            return []
        room = node.host.free() > 0 and not node.blocked
        if reach is Tier.DISK and version_id not in node.pending:  # on its disk already
            return self.loader.start(node, version_id, Tier.LOADED, now) if room else []
        if reach is Tier.COLD and not self.budget.would_allow(version.tenant_id, now):
            return []
        if room:
            node.warming.add(version_id)
        if reach is Tier.DISK:
            return []  # arriving: load_finished carries it on into memory
        return self._load_ahead(version, Tier.DISK, now, charge=False)

    def _load_ahead(
        self, version: AdapterVersion, into: Tier, now: float, *, charge: bool
    ) -> list[Action]:
        node, reach = self.placer.choose(version)
        if reach >= into:
            return []  # there, or on its way
        if reach is Tier.COLD:
            if not self.budget.would_allow(version.tenant_id, now):
                return []  # route decides: serve elsewhere, defer or refuse
            if charge:  # its request's cold load, paid early (route will not charge it)
                self.budget.reserve(version.tenant_id, now)
        return self.loader.start(node, version.version_id, into, now)

    def _count(self, request: Request, now: float) -> None:
        """A request for the version: its heat, and whether its tenant's requests hit."""
        self.cluster.bump_heat(request.version_id, now)
        held = request.version_id in self.cluster.locations
        self.reuse.record(request.tenant_id, held, now)

    def _hold_back(self, request: Request, now: float) -> Deferred | Rejected:
        """Over budget and nowhere loaded: a ticket if it comes soon enough, else a refusal."""
        ready = self.budget.ready_at(request.tenant_id, now)
        if ready - now > self.config.max_defer_s:
            return Rejected(ready - now)  # booking nothing: the refused request costs no load
        self._deferred.add(request.request_id)
        return Deferred(self.budget.reserve(request.tenant_id, now))

    def load_finished(
        self, node_id: NodeId, version: VersionId, tier: Tier, now: float
    ) -> list[Action]:
        """A load reported done: release waiting requests or start the next hop."""
        node = self.cluster.nodes[node_id]
        node.pending.pop(version, None)
        actions: list[Action] = []
        if tier is Tier.DISK:
            warming = version in node.warming and node.host.free() > 0  # a free slot only
            if version in node.waiting or version in node.want_loaded or warming:
                actions = self.loader.start(node, version, Tier.LOADED, now)
            node.warming.discard(version)
        else:
            node.want_loaded.discard(version)
            for request in node.waiting.pop(version, ()):
                node.queue.push(request, now)
            node.queue.set_active(version, node.gpu.is_active(version))
        if node.blocked:  # the finished load's entry may now be evictable
            actions.extend(self.loader.retry_blocked(node, now))
        return actions

    def load_failed(self, node_id: NodeId, version: VersionId, tier: Tier) -> list[Request]:
        """A load failed: undo its reservation; the waiting requests go back to the caller."""
        node = self.cluster.nodes[node_id]
        node.pending.pop(version, None)
        (node.host if tier is Tier.LOADED else node.disk).remove(version)
        self.cluster.note_location(node, version)
        node.want_loaded.discard(version)
        node.warming.discard(version)
        failed = node.waiting.pop(version, [])
        for request in failed:
            node.withdraw(request)
        return failed

    def dispatch(self, node_id: NodeId, now: float) -> list[Dispatch]:
        """Release queued requests while the engine has room, in dispatch order."""
        node = self.cluster.nodes[node_id]
        released: list[Dispatch] = []
        if not node.queue.size:
            return released  # the common case on a finish; keep it cheap
        yielding = self.loader.over_budget(now)
        while node.running < node.spec.max_running and node.queue.size:
            version = node.queue.peek_choice(now, node.gpu.has_free_slot(), yielding)
            if version is None:
                break
            grant = node.gpu.acquire(version)
            if grant is None:
                break
            request = node.queue.pop(version)
            if grant.displaced is not None:
                node.queue.set_active(grant.displaced, False)
            if grant.swapped_in:
                node.queue.set_active(version, True)
            node.running += 1
            released.append(
                Dispatch(node_id, request, grant.slot, grant.swapped_in, grant.displaced)
            )
        return released

    def request_finished(self, node_id: NodeId, request: Request, now: float) -> list[Action]:
        """A released request finished; room it freed may unblock loads."""
        node = self.cluster.nodes[node_id]
        node.finish(request)
        if node.blocked:
            return self.loader.retry_blocked(node, now)
        return []

    def reconcile(self, node_id: NodeId, reported: set[VersionId], now: float) -> list[Action]:
        """Align host memory with what the engine says it has loaded.

        The engine may have dropped adapters (restart, SGLang's own LRU: docs/engines.md
        §4.4) or loaded some by itself (SGLang re-loads a previously seen name on request,
        docs/engines.md §3.3). Dropped
        ones come back as RECONCILE evictions (already done; for logs and metrics) and
        their queued requests wait for a reload; adopted ones may evict by policy.
        """
        node = self.cluster.nodes[node_id]
        actions: list[Action] = []
        # An adapter with a request running on it was loaded when that request started; if
        # the report lacks it, the report is older than the start (a race), so keep it.
        gone = [
            v
            for v in node.host
            if v not in reported and v not in node.pending and not node.gpu.running(v)
        ]
        for version in gone:
            node.host.remove(version)
            actions.append(self.loader.evicted(node, version, Tier.LOADED, EvictReason.RECONCILE))
            requeued = node.queue.remove_version(version)
            if requeued:
                node.waiting.setdefault(version, []).extend(requeued)
                actions.extend(self.loader.ensure_loading(node, version, now))
        pinned = self.cluster.pinned
        for version in sorted(reported):
            if version in node.host or version not in self.cluster.versions:
                continue
            victims, fits = node.host.make_room(
                1, lambda v: node.host_evictable(v, pinned), self.loader.over_budget(now)
            )
            actions.extend(
                self.loader.evicted(node, v, Tier.LOADED, EvictReason.CAPACITY) for v in victims
            )
            if fits:
                value = self.loader.value(node, version, Tier.LOADED, now)
                node.host.insert(version, 1, value, now)
                self.cluster.note_location(node, version)
        return actions

    def restore(self, node_id: NodeId, held: Iterable[VersionId], now: float) -> list[Action]:
        """After the engine restarted: load again what it should hold, pinned versions first.

        That is what it held before (`held`) and every pinned version no engine holds now,
        as far as its rank class and host slots allow (loads that find no room wait).
        """
        node = self.cluster.nodes[node_id]
        pinned = self.cluster.pinned
        held_anywhere = {
            v for v in pinned for n in self.cluster.holders(v) if n.reach(v) >= Tier.LOADED
        }
        orphans = pinned - held_anywhere
        wanted = [
            v
            for v in {*held, *orphans}
            if v in self.cluster.versions and node.spec.fits(self.cluster.versions[v].rank)
        ]
        actions: list[Action] = []
        for version in sorted(wanted, key=lambda v: (v not in pinned, v)):
            if node.reach(version) >= Tier.LOADED:
                continue
            node.want_loaded.add(version)
            actions.extend(self.loader.ensure_loading(node, version, now))
        return actions

    def evacuate(self, node_id: NodeId, now: float) -> list[Action]:
        """Before the node leaves (drained): load what it holds elsewhere, pinned first.

        Each version the node holds in host memory (its hot set) or that is pinned goes to
        the least loaded other node of the smallest rank class that fits it, unless some
        other node already has it loaded. A version no other class fits (all of them are
        draining or down) is not moved: it is served again once a node that fits rejoins.
        At most the target's host slots are filled, so evacuating never churns its cache.
        """
        leaving = self.cluster.nodes.get(node_id)
        if leaving is None:
            return []
        pinned = self.cluster.pinned
        moving = sorted(
            {*leaving.host, *(v for v in leaving.disk if v in pinned)}
            & self.cluster.versions.keys(),
            key=lambda v: (v not in pinned, -self.cluster.heat(v, now), v),
        )
        others = [n for n in self.cluster.nodes.values() if n.node_id != node_id]
        room = {n.node_id: n.spec.host_slots - len(n.host) for n in others}
        actions: list[Action] = []
        for version in moving:
            rank = self.cluster.versions[version].rank
            if any(n.reach(version) >= Tier.LOADED for n in others):
                continue  # already loaded elsewhere: requests go there
            fits = [n for n in others if n.spec.fits(rank) and room[n.node_id] > 0]
            if not fits:
                continue
            target = min(fits, key=lambda n: (n.spec.max_lora_rank, n.load, n.node_id))
            room[target.node_id] -= 1
            target.want_loaded.add(version)
            actions.extend(self.loader.ensure_loading(target, version, now))
        return actions

    def promote(self, old: VersionId, new: VersionId, now: float) -> list[Action]:
        """Prefetch a newly promoted alias or canary version where the old one is loaded."""
        spec = self.cluster.versions[new]
        actions: list[Action] = []
        for node in list(self.cluster.holders(old)):
            if node.reach(old) < Tier.LOADED or not node.spec.fits(spec.rank):
                continue
            if node.reach(new) >= Tier.LOADED:
                continue
            node.want_loaded.add(new)
            actions.extend(self.loader.ensure_loading(node, new, now))
        return actions

    def add_node(self, spec: NodeSpec) -> None:
        """An engine joined; placement may use it from now on."""
        self.cluster.add_node(spec)
        self.placer.refresh()

    def remove_node(self, node_id: NodeId) -> None:
        """An engine left (or stopped answering); the caller re-routes what it had queued."""
        self.cluster.remove_node(node_id)
        self.placer.refresh()

    def pin(self, version: VersionId, *, within_plan: bool = True) -> bool:
        """Pin a version (never evicted) if its tenant's plan allows another pin.

        `within_plan=False` pins without counting: for pins the caller already held to the
        plan (the live gateway's pinned aliases, counted by the control plane per alias).
        """
        tenant = self.cluster.versions[version].tenant_id
        used = sum(1 for v in self.cluster.pinned if self.cluster.versions[v].tenant_id == tenant)
        if version in self.cluster.pinned:
            return True
        if within_plan and used >= self.config.plan(tenant).max_pins:
            return False
        self.cluster.pinned.add(version)
        return True

    def unpin(self, version: VersionId) -> None:
        """Let a version be evicted again."""
        self.cluster.pinned.discard(version)
