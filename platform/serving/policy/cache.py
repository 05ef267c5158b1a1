"""One capacity-bounded tier (`loaded` or `disk`) of one node."""

from __future__ import annotations

from collections.abc import Iterator

from loraplex.serving.policy.eviction import Evictable, EvictionPolicy
from loraplex.serving.policy.model import Tier, VersionId


class TierCache:
    """Entries with sizes under a capacity; the eviction policy orders victims.

    Capacity is in the tier's own unit: slots for `loaded` (SGLang's --max-loaded-loras
    counts adapters, not bytes), bytes for `disk`.
    """

    def __init__(self, tier: Tier, capacity: int, policy: EvictionPolicy) -> None:
        self.tier = tier
        self.capacity = capacity
        self.policy = policy
        self._sizes: dict[VersionId, int] = {}
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

    def insert(self, key: VersionId, size: int, value: float) -> None:
        """Add an entry; the caller made room first."""
        if key in self._sizes:
            self.policy.on_access(key, value)
            return
        if self.used + size > self.capacity:
            raise ValueError(f"{self.tier.name} full: {key} does not fit")
        self._sizes[key] = size
        self.used += size
        self.policy.on_insert(key, value)

    def touch(self, key: VersionId, value: float) -> None:
        """Record a use of an entry."""
        if key in self._sizes:
            self.policy.on_access(key, value)

    def remove(self, key: VersionId) -> bool:
        """Drop an entry if present; True when it was there."""
        size = self._sizes.pop(key, None)
        if size is None:
            return False
        self.used -= size
        self.policy.on_remove(key)
        return True

    def make_room(self, size: int, evictable: Evictable) -> tuple[list[VersionId], bool]:
        """Evict until `size` fits: the victims, and whether it now fits.

        Victims chosen before a failure stay evicted (the caller must still report them):
        the space they freed stays free, so a retry needs less, and nothing is ever over
        capacity.
        """
        victims: list[VersionId] = []
        if size > self.capacity:
            return victims, False
        while self.used + size > self.capacity:
            victim = self.policy.choose_victim(evictable)
            if victim is None:
                return victims, False
            victims.append(victim)
            self.used -= self._sizes.pop(victim)
        return victims, True
