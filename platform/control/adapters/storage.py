"""Where a version's files live in the object store, and moving them there and back.

Keys are immutable per version: `adapters/<tenant>/<adapter>/<version id>/<file>`. The object
store is synchronous (boto3), so every call here runs in a worker thread.
"""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import anyio

from loraplex.adapters.layout import CONFIG_FILE, WEIGHTS_FILE
from loraplex.adapters.store import ObjectStore, StoredObject

VERSION_FILES = (CONFIG_FILE, WEIGHTS_FILE)
ROOT_PREFIX = "adapters/"


def version_prefix(tenant_id: UUID, adapter_id: UUID, version_id: UUID) -> str:
    """The key prefix holding one version's files."""
    return f"{ROOT_PREFIX}{tenant_id}/{adapter_id}/{version_id}/"


def version_id_of(key: str) -> UUID | None:
    """The version id a key belongs to, or None when the key is not ours."""
    parts = key.split("/")
    if len(parts) != 5 or key[: len(ROOT_PREFIX)] != ROOT_PREFIX:
        return None
    try:
        return UUID(parts[3])
    except ValueError:
        return None


async def put_version(store: ObjectStore, prefix: str, folder: Path) -> dict[str, StoredObject]:
    """Upload the version's files; returns what the store recorded for each."""
    stored = {}
    for name in VERSION_FILES:
        stored[name] = await anyio.to_thread.run_sync(store.put_file, prefix + name, folder / name)
    return stored


async def delete_quietly(store: ObjectStore, prefix: str) -> None:
    """Best-effort cleanup after a failed upload; the reaper catches what this misses."""
    try:
        await anyio.to_thread.run_sync(store.delete_prefix, prefix)
    except Exception:  # the store may be the thing that failed
        return
