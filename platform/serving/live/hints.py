"""Alias moves, read from the database, as placement hints for prefetching.

Every API replica polls `adapter_aliases` for rows changed since its last look, so a
promote or canary made through any replica prefetches on the engines this replica routes
to, with no message bus. The first look only learns the current state.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import select

from loraplex.db.models import AdapterAlias

SessionFactory = Callable[[], Any]
OVERLAP = timedelta(seconds=5)  # rows committed late with an earlier updated_at


class AliasWatcher:
    """Turns alias changes into (old version, new version) prefetch hints."""

    def __init__(self, session_factory: SessionFactory) -> None:
        self._session_factory = session_factory
        self._seen: dict[UUID, tuple[UUID, UUID | None]] = {}  # alias -> (version, canary)
        self._since: datetime | None = None
        self._primed = False
        self._promoted: list[UUID] = []  # alias targets that changed, for take_promoted()

    async def moves(self) -> list[tuple[UUID, UUID]]:
        """(old, new) for every alias that moved or gained a canary since the last call."""
        query = select(
            AdapterAlias.id,
            AdapterAlias.version_id,
            AdapterAlias.canary_version_id,
            AdapterAlias.updated_at,
        )
        if self._since is not None:
            query = query.where(AdapterAlias.updated_at >= self._since - OVERLAP)
        async with self._session_factory() as session:
            rows = (await session.execute(query)).all()
        first, self._primed = not self._primed, True
        hints: list[tuple[UUID, UUID]] = []
        for alias_id, version_id, canary_id, updated_at in rows:
            if self._since is None or updated_at > self._since:
                self._since = updated_at
            before = self._seen.get(alias_id)
            self._seen[alias_id] = (version_id, canary_id)
            if first:
                continue
            if before is None or version_id != before[0]:
                self._promoted.append(version_id)
            if before is None:
                continue
            if version_id != before[0]:
                hints.append((before[0], version_id))
            if canary_id is not None and canary_id != before[1]:
                hints.append((version_id, canary_id))
        return hints

    def take_promoted(self) -> list[UUID]:
        """Versions aliases moved to (or were created at) since the last call."""
        promoted, self._promoted = self._promoted, []
        return promoted
