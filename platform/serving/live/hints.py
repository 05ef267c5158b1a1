"""Alias moves and new versions, read from the database, as placement hints for loading
ahead: a moved alias prefetches its new version, a version that became ready is warmed.

Every API replica polls `adapter_aliases` for rows changed since its last look, so a
promote or canary made through any replica prefetches on the engines this replica routes
to, with no message bus. The first look only learns the current state.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import func, select

from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, BaseModel, VersionStatus

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


class UploadWatcher:
    """Turns versions that became ready (uploads, fine-tunes, imports) into warm hints.

    Like `AliasWatcher`, it polls: rows of `adapter_versions` now ready and changed since
    its last look. The first look only learns where to start, so a restarted replica does
    not warm every version there is.
    """

    def __init__(self, session_factory: SessionFactory) -> None:
        self._session_factory = session_factory
        self._since: datetime | None = None
        self._seen: dict[UUID, datetime] = {}  # warmed within the overlap window

    async def ready(self) -> list[tuple[str, UUID]]:
        """(base model name, version) for every version that became ready since last call."""
        ready = AdapterVersion.status == VersionStatus.READY
        async with self._session_factory() as session:
            first = self._since is None
            if self._since is None:  # start at the newest ready version, or now
                latest = select(func.max(AdapterVersion.updated_at)).where(ready)
                self._since = await session.scalar(latest) or datetime.now(UTC)
            query = (
                select(AdapterVersion.id, AdapterVersion.updated_at, BaseModel.name)
                .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
                .join(BaseModel, BaseModel.id == Adapter.base_model_id)
                .where(ready, AdapterVersion.updated_at >= self._since - OVERLAP)
            )
            rows = (await session.execute(query)).all()
        # On the first look every row is already known: the overlap window's rows too.
        fresh = [] if first else [(base, vid) for vid, _, base in rows if vid not in self._seen]
        self._since = max([self._since, *(updated for _, updated, _ in rows)])
        self._seen.update((vid, updated) for vid, updated, _ in rows)
        horizon = self._since - 2 * OVERLAP
        self._seen = {vid: at for vid, at in self._seen.items() if at >= horizon}
        return fresh
