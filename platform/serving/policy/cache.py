"""One capacity-bounded tier (`loaded` or `disk`) of one node, with tenant containment.

Containment is how the cold-load budget protects other tenants' caches. Pacing a scanning
tenant's fetches is not enough on its own: each paced load still needs room, and by value
alone a scanner's adapters (used every few minutes) outrank other tenants' long tail, so
every paced load would push one of their adapters out. So while a tenant is over its
cold-load budget (`contained`), the tier orders victims in bands:

1. for a load of a contained tenant: that tenant's own entries;
2. entries of any contained tenant;
3. everyone's, by the eviction policy.

Within each band the policy's order applies, and pins and in-flight protection
(`evictable`) hold in all of them. So a tenant over budget recycles its own space, and other
tenants' loads take its entries before any of their own. It takes another tenant's entry
only when its own evictable entries cannot make room (an escape hatch, so a tenant with
nothing here can still be served). Within budget a tenant competes by value alone, so a
heavy but well-behaved tenant is unaffected.

A contained tenant that mostly misses (a scanner, see reuse.py) does not grow into free
space either (`grow=False`): its load recycles its own entries first even when the tier has
room. Free space is what a warming node has, and a scanner paced at its budget from the first
second would otherwise fill it (measured: 16-20 GB of the scan scenario's 80 GB of disk within
five minutes) and keep that footprint for good, since it recycles its own entries and other
tenants' loads strip it only slowly; their working set then no longer fits (up to ~20% more
cold loads for them). A heavy tenant over budget while it warms up mostly hits, so it still
grows: recycling its own entries would keep it missing, and so over budget, for good.

A fair-share floor for contained tenants (others' loads trim them only down to capacity /
tenants) was tried and measured worse for the other tenants' p99 in the scan scenario.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from .eviction import Evictable, EvictionPolicy
from .model import TenantId, Tier, VersionId

Owner = Callable[[VersionId], TenantId]


class TierCache:
    """Entries with sizes under a capacity; the eviction policy orders victims.

    Capacity is in the tier's own unit: slots for `loaded` (SGLang's --max-loaded-loras
    counts adapters, not bytes), bytes for `disk`.
    """

    def __init__(self, tier: Tier, capacity: int, policy: EvictionPolicy, owner: Owner) -> None:
        self.tier = tier
        self.capacity = capacity
        self.policy = policy
        self._owner = owner
        self._sizes: dict[VersionId, int] = {}
        self._used_by: dict[TenantId, int] = {}  # capacity each tenant's entries take
        self.used = 0

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def __iter__(self) -> Iterator[VersionId]:
        return iter(self._sizes)

    def free(self) -> int:
        """Capacity not used or reserved."""
        return self.capacity - self.used

    def used_by(self, tenant: TenantId) -> int:
        """Capacity the tenant's entries take in this tier."""
        return self._used_by.get(tenant, 0)

    def insert(self, key: VersionId, size: int, value: float, now: float = 0.0) -> None:
        """Add an entry at `now` (the policy ages entries from it); the caller made room."""
        if key in self._sizes:
            self.policy.on_access(key, value, now)
            return
        if self.used + size > self.capacity:
            raise ValueError(f"{self.tier.name} full: {key} does not fit")
        self._sizes[key] = size
        self.used += size
        tenant = self._owner(key)
        self._used_by[tenant] = self._used_by.get(tenant, 0) + size
        self.policy.on_insert(key, value, now)

    def touch(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """Record a use of an entry at `now`."""
        if key in self._sizes:
            self.policy.on_access(key, value, now)

    def remove(self, key: VersionId) -> bool:
        """Drop an entry if present; True when it was there."""
        if key not in self._sizes:
            return False
        self._forget(key)
        self.policy.on_remove(key)
        return True

    def make_room(
        self,
        size: int,
        evictable: Evictable,
        contained: Collection[TenantId] = (),
        tenant: TenantId | None = None,
        *,
        grow: bool = True,
    ) -> tuple[list[VersionId], bool]:
        """Evict until `size` fits for `tenant`, in the bands the module describes.

        `grow=False`: first recycle the tenant's own entries, so that the load does not grow
        its footprint even where free space would take it.

        Returns the victims and whether it now fits. Victims chosen before a failure stay
        evicted (the caller must still report them): the space they freed stays free, so a
        retry needs less, and nothing is ever over capacity.
        """
        victims: list[VersionId] = []
        if size > self.capacity:
            return victims, False
        if not grow and tenant is not None:
            self._recycle_own(size, tenant, evictable, victims)
        present = [t for t in contained if t in self._used_by] if contained else ()
        if present:
            for band in self._bands(evictable, present, tenant):
                if self._evict_until_fits(size, band, victims, in_order=False):
                    return victims, True
        return victims, self._evict_until_fits(size, evictable, victims)

    def _recycle_own(
        self, size: int, tenant: TenantId, evictable: Evictable, victims: list[VersionId]
    ) -> None:
        """Evict the tenant's own entries until this load will not grow its footprint."""
        own = self._owned_by(tenant, evictable)
        limit = max(self.used_by(tenant), size)
        while self.used_by(tenant) + size > limit:
            victim = self.policy.choose_victim(own, in_order=False)
            if victim is None:
                return  # the rest is in use: the bands below find the room
            victims.append(victim)
            self._forget(victim)

    def _bands(
        self, evictable: Evictable, contained: list[TenantId], tenant: TenantId | None
    ) -> list[Evictable]:
        owner = self._owner

        def of_contained(key: VersionId) -> bool:
            return owner(key) in contained and evictable(key)

        if tenant in contained:
            return [self._owned_by(tenant, evictable), of_contained]
        return [of_contained]

    def _owned_by(self, tenant: TenantId | None, evictable: Evictable) -> Evictable:
        """`evictable`, narrowed to the tenant's own entries."""
        owner = self._owner

        def own(key: VersionId) -> bool:
            return owner(key) == tenant and evictable(key)

        return own

    def _evict_until_fits(
        self, size: int, evictable: Evictable, victims: list[VersionId], *, in_order: bool = True
    ) -> bool:
        while self.used + size > self.capacity:
            victim = self.policy.choose_victim(evictable, in_order=in_order)
            if victim is None:
                return False
            victims.append(victim)
            self._forget(victim)
        return True

    def _forget(self, key: VersionId) -> None:
        size = self._sizes.pop(key)
        self.used -= size
        tenant = self._owner(key)
        left = self._used_by[tenant] - size
        if left:
            self._used_by[tenant] = left
        else:
            del self._used_by[tenant]
