"""Eviction policies for the `loaded` and `disk` tiers, chosen by name from a registry."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal, Protocol

from .model import VersionId

Evictable = Callable[[VersionId], bool]
NextUse = Callable[[VersionId], float]
# What a disk entry's value weighs its heat by (loads.py): the seconds a reload would take,
# or the number of loads alone (heat per MB, which minimises how many cold loads happen).
DiskValue = Literal["reload_s", "loads"]


class EvictionPolicy(Protocol):
    """Orders one tier's entries for eviction; the cache decides what is protected."""

    name: str
    disk_value: DiskValue

    def on_insert(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """A new entry; `value` is its heat weighed by reload cost and size at `now`."""
        ...

    def on_access(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """An entry was used at `now`."""
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
    """Least recently used: the baseline, and SGLang's host tier (docs/engines.md §4.4)."""

    name = "lru"
    disk_value: DiskValue = "reload_s"

    def __init__(self) -> None:
        self._order: OrderedDict[VersionId, None] = OrderedDict()

    def on_insert(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """Newest goes to the back."""
        self._order[key] = None
        self._order.move_to_end(key)

    def on_access(self, key: VersionId, value: float, now: float = 0.0) -> None:
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


class _PriorityHeap:
    """Keys with priorities; pops the lowest one a predicate allows. Lazy deletion."""

    def __init__(self) -> None:
        self._priority: dict[VersionId, float] = {}
        self._heap: list[tuple[float, int, VersionId]] = []
        self._seq = itertools.count()

    def __contains__(self, key: object) -> bool:
        return key in self._priority

    def set(self, key: VersionId, priority: float) -> None:
        """Insert or re-prioritise; the old heap item goes stale."""
        self._priority[key] = priority
        heapq.heappush(self._heap, (priority, next(self._seq), key))
        if len(self._heap) > 4 * len(self._priority) + 64:
            self._heap = [(p, next(self._seq), k) for k, p in self._priority.items()]
            heapq.heapify(self._heap)

    def remove(self, key: VersionId) -> None:
        """Forget the key; its heap item is skipped when it surfaces."""
        self._priority.pop(key, None)

    def pop_lowest(self, allowed: Evictable) -> tuple[VersionId, float] | None:
        """Remove and return the lowest-priority key `allowed` accepts, with its priority."""
        skipped: list[tuple[float, int, VersionId]] = []
        taken: tuple[VersionId, float] | None = None
        while self._heap:
            item = heapq.heappop(self._heap)
            priority, _, key = item
            if self._priority.get(key) != priority:
                continue  # stale: re-prioritised or removed since
            if allowed(key):
                del self._priority[key]
                taken = (key, priority)
                break
            skipped.append(item)
        for item in skipped:
            heapq.heappush(self._heap, item)
        return taken


class GdsfPolicy:
    """Greedy-Dual-Size-Frequency: priority = L + heat x reload cost / size.

    L is the priority of the last victim, so entries that stop being used age out without
    a periodic sweep; `value` already folds in heat, cost and size. A heap with lazy
    deletion keeps every operation O(log n).
    """

    name = "gdsf"
    disk_value: DiskValue = "reload_s"

    def __init__(self) -> None:
        self._inflation = 0.0
        self._heap = _PriorityHeap()

    def on_insert(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """Enter with priority L + value."""
        self._heap.set(key, self._inflation + value)

    def on_access(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """Refresh the priority from the current L."""
        if key in self._heap:
            self._heap.set(key, self._inflation + value)

    def on_remove(self, key: VersionId) -> None:
        """Forget the entry."""
        self._heap.remove(key)

    def choose_victim(self, evictable: Evictable, *, in_order: bool = True) -> VersionId | None:
        """Lowest priority evictable entry; raises L to its priority when taken in order.

        L stands for the value of what the tier gives up under pressure. A containment band
        (cache.py) evicts a contained tenant's entry ahead of cheaper ones, so its priority
        says nothing about that; letting it raise L (scan entries are warm, so it would jump)
        ages every other tenant's entries at once and turns GDSF into LRU for them: the
        scanning tenant then costs the others cold loads after all.
        """
        taken = self._heap.pop_lowest(evictable)
        if taken is None:
            return None
        victim, priority = taken
        if in_order:
            self._inflation = max(self._inflation, priority)
        return victim


AGE_HALF_LIFE_S = 3000.0
_TINY = 1e-300  # a zero value (no heat yet) still sorts, below every positive one


class DecayedLfuPolicy:
    """Decayed frequency per unit of capacity: evict the entry whose recent heat is lowest.

    An entry's priority is its value when last used (`value`: heat, weighed by reload cost
    and size, loads.py), halved for every AGE_HALF_LIFE_S since. Every entry's discount
    grows at the same rate, so the policy stores log(value) + now / tau (tau = half-life /
    ln 2): the order of those keys is the order of the discounted values at any later
    moment, and nothing needs re-sorting as time passes. A heap with lazy deletion keeps
    every operation O(log n).

    Why these parts (variants compared on the simulator's stationary and shifting
    workloads at seeds 0-2, the result checked with `loraplex simulate --scenario targets
    --seeds 0-9`):

    - Heat (cluster.py) is kept for every version, cached or not. A version reloaded after
      an eviction comes back with its history, and one seen for the first time enters at
      heat 1, below every proven entry of its size: the history does the work of an
      admission filter for one-hit adapters, without a separate ghost list.
    - On disk the value is heat per MB (`disk_value = "loads"`): each cold load is one
      fetch and one budget ticket whatever its size, and a rank-64 adapter takes the room of
      eight rank-8 ones. Weighing by reload seconds as GDSF does keeps large adapters and
      measured ~20% more cold loads, and no fewer seconds spent loading.
    - The age discount is slow on purpose. An entry's heat is re-read each time it is used,
      so entries still in use follow a popularity shift by themselves; the discount is for
      entries nobody asks for any more (a replaced version, a hot set that moved on), which
      would otherwise keep their last heat for good. Half-lives of 1200 s and 600 s
      measured ~6% and ~18% more cold loads; no discount at all measured ~2% fewer but
      never lets such an entry go.
    - No GDSF floor L: aging comes from the discount, so a victim taken out of order (a
      containment band, cache.py) changes nothing for the others.
    """

    name = "dlfu"
    disk_value: DiskValue = "loads"

    def __init__(self, age_half_life_s: float = AGE_HALF_LIFE_S) -> None:
        self._per_s = math.log(2) / age_half_life_s
        self._heap = _PriorityHeap()

    def on_insert(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """Enter with the value it has now."""
        self._heap.set(key, self._key(value, now))

    def on_access(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """Restart the discount from the value it has now."""
        if key in self._heap:
            self._heap.set(key, self._key(value, now))

    def on_remove(self, key: VersionId) -> None:
        """Forget the entry."""
        self._heap.remove(key)

    def choose_victim(self, evictable: Evictable, *, in_order: bool = True) -> VersionId | None:
        """Lowest discounted value among the evictable entries."""
        taken = self._heap.pop_lowest(evictable)
        return taken[0] if taken else None

    def _key(self, value: float, now: float) -> float:
        return math.log(max(value, _TINY)) + now * self._per_s


class BeladyPolicy:
    """Clairvoyant: evict the entry used farthest in the future (simulator only).

    It needs the future trace, so only the simulator can build one. With several nodes and
    replicas it is a strong reference point rather than a proven optimum. Choosing is O(n)
    per eviction, which is fine for the comparison scenarios it runs in.
    """

    name = "belady"
    disk_value: DiskValue = "reload_s"

    def __init__(self, next_use: NextUse) -> None:
        self._next_use = next_use
        self._keys: dict[VersionId, None] = {}

    def on_insert(self, key: VersionId, value: float, now: float = 0.0) -> None:
        """Track the entry."""
        self._keys[key] = None

    def on_access(self, key: VersionId, value: float, now: float = 0.0) -> None:
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
    "dlfu": lambda _: DecayedLfuPolicy(),
    "belady": _belady,
}
DEFAULT_EVICTION = "dlfu"


def make_eviction_policy(name: str, next_use: NextUse | None = None) -> EvictionPolicy:
    """Build the policy registered under `name`."""
    try:
        factory = EVICTION_POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(EVICTION_POLICIES))
        raise ValueError(f"unknown eviction policy {name!r}; known: {known}") from None
    return factory(next_use)
