"""Eviction policies for the `loaded` and `disk` tiers, chosen by name from a registry."""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from loraplex.serving.policy.model import VersionId

Evictable = Callable[[VersionId], bool]
NextUse = Callable[[VersionId], float]


class EvictionPolicy(Protocol):
    """Orders one tier's entries for eviction; the cache decides what is protected."""

    name: str

    def on_insert(self, key: VersionId, value: float) -> None:
        """A new entry; `value` is heat x reload cost / size at this moment."""
        ...

    def on_access(self, key: VersionId, value: float) -> None:
        """An entry was used."""
        ...

    def on_remove(self, key: VersionId) -> None:
        """An entry left the tier for a reason other than `choose_victim`."""
        ...

    def choose_victim(self, evictable: Evictable, *, in_order: bool = True) -> VersionId | None:
        """Remove and return the entry to evict among those `evictable` allows, if any.

        `in_order=False` marks a victim taken out of the policy's order (a containment band,
        cache.py): it must not change how the remaining entries age.
        """
        ...


class LruPolicy:
    """Least recently used: the baseline, and what SGLang does for its CPU tier (§4.4)."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[VersionId, None] = OrderedDict()

    def on_insert(self, key: VersionId, value: float) -> None:
        """Newest goes to the back."""
        self._order[key] = None
        self._order.move_to_end(key)

    def on_access(self, key: VersionId, value: float) -> None:
        """Move to the back."""
        if key in self._order:
            self._order.move_to_end(key)

    def on_remove(self, key: VersionId) -> None:
        """Forget the entry."""
        self._order.pop(key, None)

    def choose_victim(self, evictable: Evictable, *, in_order: bool = True) -> VersionId | None:
        """The oldest evictable entry; protected ones are few and recently used."""
        for key in self._order:
            if evictable(key):
                del self._order[key]
                return key
        return None


class GdsfPolicy:
    """Greedy-Dual-Size-Frequency: priority = L + heat x reload cost / size.

    L is the priority of the last victim, so entries that stop being used age out without
    a periodic sweep; `value` already folds in heat, cost and size. A heap with lazy
    deletion keeps every operation O(log n).
    """

    name = "gdsf"

    def __init__(self) -> None:
        self._inflation = 0.0
        self._priority: dict[VersionId, float] = {}
        self._heap: list[tuple[float, int, VersionId]] = []
        self._seq = itertools.count()

    def on_insert(self, key: VersionId, value: float) -> None:
        """Enter with priority L + value."""
        self._set(key, self._inflation + value)

    def on_access(self, key: VersionId, value: float) -> None:
        """Refresh the priority from the current L."""
        if key in self._priority:
            self._set(key, self._inflation + value)

    def on_remove(self, key: VersionId) -> None:
        """Forget the entry; its heap item is skipped when it surfaces."""
        self._priority.pop(key, None)

    def choose_victim(self, evictable: Evictable, *, in_order: bool = True) -> VersionId | None:
        """Lowest priority evictable entry; raises L to its priority when taken in order.

        L stands for the value of what the tier gives up under pressure. A containment band
        (cache.py) evicts a contained tenant's entry ahead of cheaper ones, so its priority
        says nothing about that; letting it raise L (scan entries are warm, so it would jump)
        ages every other tenant's entries at once and turns GDSF into LRU for them: the
        scanning tenant then costs the others cold loads after all.
        """
        skipped: list[tuple[float, int, VersionId]] = []
        victim: VersionId | None = None
        while self._heap:
            item = heapq.heappop(self._heap)
            priority, _, key = item
            if self._priority.get(key) != priority:
                continue  # stale: re-prioritised or removed since
            if evictable(key):
                victim = key
                if in_order:
                    self._inflation = max(self._inflation, priority)
                del self._priority[key]
                break
            skipped.append(item)
        for item in skipped:
            heapq.heappush(self._heap, item)
        return victim

    def _set(self, key: VersionId, priority: float) -> None:
        self._priority[key] = priority
        heapq.heappush(self._heap, (priority, next(self._seq), key))
        if len(self._heap) > 4 * len(self._priority) + 64:
            self._compact()

    def _compact(self) -> None:
        self._heap = [(p, next(self._seq), k) for k, p in self._priority.items()]
        heapq.heapify(self._heap)


class BeladyPolicy:
    """Clairvoyant: evict the entry used farthest in the future (simulator only).

    It needs the future trace, so only the simulator can build one. With several nodes and
    replicas it is a strong reference point rather than a proven optimum. Choosing is O(n)
    per eviction, which is fine for the comparison scenarios it runs in.
    """

    name = "belady"

    def __init__(self, next_use: NextUse) -> None:
        self._next_use = next_use
        self._keys: dict[VersionId, None] = {}

    def on_insert(self, key: VersionId, value: float) -> None:
        """Track the entry."""
        self._keys[key] = None

    def on_access(self, key: VersionId, value: float) -> None:
        """Nothing to record: the future decides."""

    def on_remove(self, key: VersionId) -> None:
        """Forget the entry."""
        self._keys.pop(key, None)

    def choose_victim(self, evictable: Evictable, *, in_order: bool = True) -> VersionId | None:
        """The evictable entry whose next request is farthest away."""
        best: VersionId | None = None
        best_time = -1.0
        for key in self._keys:
            if evictable(key):
                when = self._next_use(key)
                if when > best_time:
                    best, best_time = key, when
        if best is not None:
            del self._keys[best]
        return best


PolicyFactory = Callable[[NextUse | None], EvictionPolicy]


def _belady(next_use: NextUse | None) -> EvictionPolicy:
    if next_use is None:
        raise ValueError("belady needs the future trace; only the simulator can use it")
    return BeladyPolicy(next_use)


EVICTION_POLICIES: dict[str, PolicyFactory] = {
    "lru": lambda _: LruPolicy(),
    "gdsf": lambda _: GdsfPolicy(),
    "belady": _belady,
}
DEFAULT_EVICTION = "gdsf"


def make_eviction_policy(name: str, next_use: NextUse | None = None) -> EvictionPolicy:
    """Build the policy registered under `name`."""
    try:
        factory = EVICTION_POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(EVICTION_POLICIES))
        raise ValueError(f"unknown eviction policy {name!r}; known: {known}") from None
    return factory(next_use)
