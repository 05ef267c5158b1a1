"""The policy's view of one engine node: its tiers, GPU slots and queue."""

from __future__ import annotations

from collections import deque

from .cache import Owner, TierCache
from .dispatch import DispatchQueue
from .eviction import EvictionPolicy
from .model import NodeSpec, Request, Tier, VersionId
from .slots import GpuSlots


class NodeState:
    """Tiers, slots, in-flight counts and pending loads of one engine node.

    A load reserves its space when it starts (the entry is in the cache but also in
    `pending`), so capacity holds even while loads are in progress.
    """

    def __init__(
        self,
        spec: NodeSpec,
        host_policy: EvictionPolicy,
        disk_policy: EvictionPolicy,
        queue: DispatchQueue,
        owner: Owner,
    ) -> None:
        self.spec = spec
        self.node_id = spec.node_id
        self.disk = TierCache(Tier.DISK, spec.disk_budget_bytes, disk_policy, owner)
        self.host = TierCache(Tier.LOADED, spec.host_slots, host_policy, owner)
        self.gpu = GpuSlots(spec.gpu_slots)
        self.queue = queue
        self.running = 0
        self._load = 0
        self.inflight: dict[VersionId, int] = {}  # routed here and not finished
        self.pending: dict[VersionId, Tier] = {}  # load in progress, to this tier
        self.waiting: dict[VersionId, list[Request]] = {}  # for their host load
        self.want_loaded: set[VersionId] = set()  # prefetches that continue past disk
        self.warming: set[VersionId] = set()  # uploads that continue if a host slot is free
        self.blocked: deque[tuple[VersionId, Tier]] = deque()  # loads waiting for room

    @property
    def load(self) -> int:
        """Requests routed here and not finished: running, queued or waiting for a load."""
        return self._load

    def tier_of(self, version: VersionId) -> Tier:
        """The highest tier the version has fully reached here."""
        pending = self.pending.get(version)
        if self.gpu.is_active(version):
            return Tier.ACTIVE
        if version in self.host and pending is not Tier.LOADED:
            return Tier.LOADED
        if version in self.disk and pending is not Tier.DISK:
            return Tier.DISK
        return Tier.COLD

    def starts_now(self, version: VersionId) -> bool:
        """Whether a request for the version would get a GPU slot here at once: the
        adapter holds one, or one is free (dispatch gives a free slot out as soon as any
        request waits for one, so a free slot is not spoken for)."""
        return self.gpu.is_active(version) or self.gpu.has_free_slot()

    def reach(self, version: VersionId) -> Tier:
        """The tier the version has here or is being loaded into."""
        return max(self.tier_of(version), self.pending.get(version, Tier.COLD))

    def is_overloaded(self) -> bool:
        """More routed here than the engine runs at once."""
        return self._load >= self.spec.max_running

    def admit(self, request: Request) -> None:
        """A request was routed here; it protects its adapter until it finishes."""
        version = request.version_id
        self.inflight[version] = self.inflight.get(version, 0) + 1
        self._load += 1

    def finish(self, request: Request) -> None:
        """A request released earlier finished (or failed) on the engine."""
        version = request.version_id
        self.running -= 1
        self.gpu.release(version)
        self._unref(version)

    def withdraw(self, request: Request) -> None:
        """A request that never ran leaves the node (rerouted or failed)."""
        self._unref(request.version_id)

    def host_evictable(self, version: VersionId, pinned: set[VersionId]) -> bool:
        """In-flight, pinned and still-loading entries stay."""
        return (
            version not in pinned and version not in self.inflight and version not in self.pending
        )

    def disk_evictable(self, version: VersionId, pinned: set[VersionId]) -> bool:
        """A disk copy stays while it is pinned, arriving, or feeding a host load."""
        return version not in pinned and version not in self.pending

    def _unref(self, version: VersionId) -> None:
        left = self.inflight[version] - 1
        if left:
            self.inflight[version] = left
        else:
            del self.inflight[version]
        self._load -= 1
