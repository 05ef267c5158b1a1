"""Getting an adapter version onto an engine: object store → node disk cache → engine load.

Engine-side adapter names are derived from the version id alone, so user text never reaches
an engine, two versions never share a name, and a name read back from an engine maps back
to exactly one version.
"""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple
from uuid import UUID

from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.policy import Tier
from loraplex.serving.registry import EngineHandle

ENGINE_NAME_PREFIX = "lpx-"


class Placement(NamedTuple):
    """Where a request found its adapter, and how long making it loaded took."""

    name: str  # engine-side adapter name, for GenerateRequest.adapter
    tier: Tier  # LOADED (already on the engine), DISK (node cache) or COLD (object store)
    seconds: float  # time spent in ensure_on_engine
    made_load: bool = False  # this caller started the load (others waiting on it share it)

    @property
    def tier_label(self) -> str:
        """The tier as a metrics label: "loaded", "disk" or "cold"."""
        return self.tier.name.lower()


def engine_adapter_name(version_id: UUID) -> str:
    """The internal, per-version name an engine knows an adapter version by."""
    return ENGINE_NAME_PREFIX + version_id.hex


def version_id_from_engine_name(engine_name: str) -> UUID | None:
    """The version an engine-side name stands for; None for a name Loraplex did not make."""
    if not engine_name.startswith(ENGINE_NAME_PREFIX):
        return None
    try:
        return UUID(hex=engine_name.removeprefix(ENGINE_NAME_PREFIX))
    except ValueError:
        return None


async def ensure_on_engine(
    handle: EngineHandle,
    version_id: UUID,
    storage_key_prefix: str,
    files: dict[str, str],
    cache: DiskCache,
) -> Placement:
    """Make the version loaded on the engine (one load per engine and version at a time).

    `files` maps file name to sha256, as recorded for the version. Raises the driver's
    `EngineError`s and the store's `StoreError`s; nothing is marked loaded on failure.
    """
    started = time.perf_counter()
    name = engine_adapter_name(version_id)
    if name in handle.loaded:
        return Placement(name, Tier.LOADED, time.perf_counter() - started)
    task = handle.loading.get(name)
    made_load = task is None
    if task is None:
        tier = Tier.DISK if version_id in cache else Tier.COLD
        task = asyncio.create_task(
            _load(handle, name, version_id, storage_key_prefix, files, cache, tier)
        )
        handle.loading[name] = task
        task.add_done_callback(lambda done: _load_finished(handle, name, done))
    # Shielded: one caller giving up must not cancel the load the others are waiting on.
    tier = await asyncio.shield(task)
    return Placement(name, tier, time.perf_counter() - started, made_load)


async def _load(
    handle: EngineHandle,
    name: str,
    version_id: UUID,
    prefix: str,
    files: dict[str, str],
    cache: DiskCache,
    tier: Tier,
) -> Tier:
    # Pinned while the engine reads the files; afterwards the engine holds its own copy. But
    # SGLang (0.5.23) silently re-reads the path when a request names an adapter its own LRU
    # dropped; if this cache evicted the folder by then the engine answers 400, and the
    # gateway must discard the name from `handle.loaded` and call ensure_on_engine again.
    async with cache.use(version_id, prefix, files) as path:
        await handle.driver.load(name, path)
    handle.loaded.add(name)
    return tier


def _load_finished(handle: EngineHandle, name: str, task: asyncio.Task[Tier]) -> None:
    if handle.loading.get(name) is task:
        del handle.loading[name]
