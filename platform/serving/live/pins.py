"""Which adapter versions live placement keeps resident: operator pins and pinned aliases.

Two sources feed one set. An operator pins a version by id (`/api/v1/placement/pins`); that
pin lives in this process until unpinned or restart. A tenant pins an alias; that pin is a
row in the database, so every API replica reads the same pins, and since what is read is
the version the alias points at *now*, the pin follows the alias when it moves. A version
stays pinned while either source holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NEVER_READ = float("-inf")  # the alias pins have not been read yet: the first round reads them


@dataclass(frozen=True, slots=True)
class PinChanges:
    """What one read of the pinned aliases changed: versions to pin, versions to unpin."""

    pinned: frozenset[str]
    unpinned: frozenset[str]


@dataclass
class Pins:
    """The pinned versions (string ids, as the policy core names them)."""

    by_operator: set[str] = field(default_factory=set)
    by_alias: frozenset[str] = frozenset()
    aliases_read_at: float = NEVER_READ

    def __contains__(self, version: object) -> bool:
        return version in self.by_operator or version in self.by_alias

    def aliases_due(self, now: float, every_s: float) -> bool:
        """Whether the pinned aliases should be read again."""
        return now - self.aliases_read_at >= every_s

    def follow_aliases(self, versions: frozenset[str], now: float) -> PinChanges:
        """Take what pinned aliases point at now; returns what that pins and unpins."""
        before = frozenset(self.by_alias | self.by_operator)
        self.by_alias, self.aliases_read_at = versions, now
        after = frozenset(self.by_alias | self.by_operator)
        return PinChanges(pinned=after - before, unpinned=before - after)
