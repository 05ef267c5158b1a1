"""Removes what failed uploads leave behind: stale `uploading` rows and orphan objects.

An upload that dies between writing objects and committing `ready` (process killed, store
outage while cleaning up) leaves objects no ready or archived version owns. The reaper marks
uploads older than `stale_after_s` as failed, then deletes every object whose version is not
stored. Run it periodically (Celery beat) or with `loraplex adapters reap`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

import anyio
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.control.adapters.storage import ROOT_PREFIX, version_id_of
from loraplex.db.models import AdapterVersion, VersionStatus

IN_FLIGHT = (VersionStatus.UPLOADING, VersionStatus.VALIDATING)
KEPT = (*IN_FLIGHT, VersionStatus.READY, VersionStatus.ARCHIVED)


@dataclass(frozen=True)
class ReapReport:
    """What one reaper pass changed."""

    stale_versions_failed: int
    orphan_objects_deleted: int


async def reap(
    session: AsyncSession,
    store: ObjectStore,
    *,
    stale_after_s: float = 3600.0,
    now: datetime | None = None,
) -> ReapReport:
    """Fail stale uploads, then delete objects that belong to no kept version."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=stale_after_s)
    failed = await session.execute(
        update(AdapterVersion)
        .where(AdapterVersion.status.in_(IN_FLIGHT), AdapterVersion.updated_at < cutoff)
        .values(status=VersionStatus.FAILED, error="upload did not finish; reaped")
        .returning(AdapterVersion.id)
    )
    stale = len(failed.all())
    await session.commit()
    kept = set(
        (
            await session.execute(select(AdapterVersion.id).where(AdapterVersion.status.in_(KEPT)))
        ).scalars()
    )
    keys = await anyio.to_thread.run_sync(store.list_keys, ROOT_PREFIX)
    orphans = [k for k in keys if _is_orphan(k, kept)]
    for key in orphans:
        await anyio.to_thread.run_sync(store.delete, key)
    return ReapReport(stale_versions_failed=stale, orphan_objects_deleted=len(orphans))


def _is_orphan(key: str, kept: set[UUID]) -> bool:
    version_id = version_id_of(key)
    return version_id is not None and version_id not in kept
