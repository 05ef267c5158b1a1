"""GPU slots of one engine, as the gateway models them (SGLang does not expose them).

SGLang's two tiers and its slot pool are described in docs/engines.md §4.1 and §4.3.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from .model import VersionId


class _Empty:
    """The type of EMPTY; a named sentinel rather than a magic value."""

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY: Final = _Empty()


@dataclass(frozen=True, slots=True)
class SlotGrant:
    """The slot a request runs in, and whether an adapter had to be swapped in."""

    slot: int
    swapped_in: bool
    displaced: VersionId | None


class GpuSlots:
    """Fixed slots; an adapter keeps its slot after its requests finish until it is needed.

    Like SGLang's pool (docs/engines.md §4.3): an empty slot is used first, otherwise the
    least recently used idle adapter gives its slot up; an adapter with running requests never does.
    """

    def __init__(self, count: int) -> None:
        self.slots: list[VersionId | _Empty] = [EMPTY] * count
        self._slot_of: dict[VersionId, int] = {}
        self._running: dict[VersionId, int] = {}
        self._idle: OrderedDict[VersionId, None] = OrderedDict()
        self._empty: list[int] = list(range(count - 1, -1, -1))

    def is_active(self, version: VersionId) -> bool:
        """Whether the adapter holds a slot."""
        return version in self._slot_of

    def running(self, version: VersionId) -> int:
        """Requests running on the adapter."""
        return self._running.get(version, 0)

    def has_free_slot(self) -> bool:
        """Whether an adapter not yet resident could get a slot now."""
        return bool(self._empty) or bool(self._idle)

    def num_occupied(self) -> int:
        """Slots holding an adapter."""
        return len(self._slot_of)

    def acquire(self, version: VersionId) -> SlotGrant | None:
        """Start one request on `version`; None when every slot is busy."""
        slot = self._slot_of.get(version)
        if slot is not None:
            self._idle.pop(version, None)
            self._running[version] = self._running.get(version, 0) + 1
            return SlotGrant(slot, swapped_in=False, displaced=None)
        displaced: VersionId | None = None
        if self._empty:
            slot = self._empty.pop()
        elif self._idle:
            displaced, _ = self._idle.popitem(last=False)
            slot = self._slot_of.pop(displaced)
        else:
            return None
        self.slots[slot] = version
        self._slot_of[version] = slot
        self._running[version] = 1
        return SlotGrant(slot, swapped_in=True, displaced=displaced)

    def release(self, version: VersionId) -> None:
        """One request on `version` finished; the adapter stays resident, idle."""
        left = self._running[version] - 1
        if left:
            self._running[version] = left
            return
        del self._running[version]
        self._idle[version] = None

    def drop(self, version: VersionId) -> bool:
        """Free the adapter's slot (it left host memory); only idle adapters can go."""
        if version in self._running or version not in self._slot_of:
            return False
        slot = self._slot_of.pop(version)
        self._idle.pop(version, None)
        self.slots[slot] = EMPTY
        self._empty.append(slot)
        return True
