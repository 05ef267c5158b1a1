"""How long the last few engine loads of each adapter version took, for the console.

A small record in this process only (not the database): the adapter page shows a tenant
what a cold start costs. Bounded both ways, so a long-running gateway that has loaded many
versions keeps a fixed amount: `per_version` loads each, for the `versions` most recent.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import datetime

LOADS_PER_VERSION = 5
VERSIONS_KEPT = 1000


@dataclass(frozen=True, slots=True)
class LoadTime:
    """One finished load of a version into an engine (a fetch to the node's disk alone is
    not one: with agents it does nothing, the load pulls what it lacks)."""

    engine: str  # the engine's name
    came_from: str  # where the engine's node found it: "cold" (object store), "disk", "loaded"
    seconds: float
    finished_at: datetime  # wall clock, UTC


class LoadTimes:
    """The newest loads per version, oldest versions forgotten first."""

    def __init__(self, per_version: int = LOADS_PER_VERSION, versions: int = VERSIONS_KEPT):
        self.per_version = per_version
        self.versions = versions
        self._loads: OrderedDict[str, deque[LoadTime]] = OrderedDict()

    def record(self, version_id: str, load: LoadTime) -> None:
        """Remember a finished load; the version becomes the most recently loaded."""
        loads = self._loads.pop(version_id, None) or deque(maxlen=self.per_version)
        loads.append(load)
        self._loads[version_id] = loads
        while len(self._loads) > self.versions:
            self._loads.popitem(last=False)

    def of(self, version_id: str) -> list[LoadTime]:
        """The version's remembered loads, newest first (empty if none)."""
        return list(reversed(self._loads.get(version_id, ())))
