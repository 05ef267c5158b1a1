"""The node's adapter cache: version files pulled from the object store onto local disk.

Layout: `root/<version id>/<file>`. A version directory appears only complete — files are
downloaded (and sha256-checked by the store) into `root/.incoming/` and the directory is
renamed into place — so a present directory is trusted without re-hashing: versions are
immutable.

The cache never chooses what to evict; an eviction policy from `loraplex.serving.policy`
does, and the cache carries it out. There is one evictor per cache, in one of two modes:

- Run by the policy core (`follow_policy`, called by live placement for the gateway's own
  cache). The core's disk tier of each engine node already budgets the bytes and picks the
  victims; its `Evict(DISK)` decisions arrive as `discard`. A discard of a version in use
  (pinned: an engine still reads its folder) is carried out when the last pin goes, unless
  the version is asked for again first. The cache chooses nothing among what the core
  placed. Its one safety stop over budget is the copies a previous process left, which no
  core knows of: those go first, oldest first, until the budget holds or none is left.
  Should it still be over budget (several local engines or base models, each budgeted by
  the core on its own, sharing this one cache), a hard cap removes the oldest unpinned
  copies and says so in the log: a safety stop for a configuration the core does not
  model, never the policy for one it does.
- Standalone (the default, and `loraplex agent`, which has no policy core): the cache's own
  `LruPolicy` from the policy package picks the least recently used unpinned version
  whenever the cache is over its byte budget. That LRU is the only evictor of an agent's
  disk: the gateway's core models an agent node's disk tier to place requests, but its disk
  decisions for such a node are no-ops (`AgentOps`).

In both modes a pinned version is never removed, so the cache may be over its budget while
pins last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

from loraplex.adapters.errors import ObjectMissing
from loraplex.adapters.store import ObjectStore
from loraplex.serving.policy import EvictionPolicy, LruPolicy

log = logging.getLogger("loraplex.serving.disk_cache")

INCOMING = ".incoming"  # downloads in progress
TRASH = ".trash"  # evicted versions, removed in the background


class DiskCache:
    """Adapter versions on local disk under a byte budget, filled on demand from the store."""

    def __init__(self, root: Path, budget_bytes: int, store: ObjectStore) -> None:
        self.root = root
        self.budget_bytes = budget_bytes
        self.store = store
        self.hits = 0  # ensure() found the version on disk
        self.misses = 0  # ensure() had to wait for a download (its own or a shared one)
        self.downloads = 0  # downloads started: with single-flight, at most one per miss burst
        self.evictions = 0
        self.used_bytes = 0
        self._sizes: dict[UUID, int] = {}
        # Picks victims over budget: every version, or once the policy core decides
        # (`follow_policy`), only the copies left by a previous process.
        self._evictor: EvictionPolicy = LruPolicy()
        self._policy_decides = False
        self._doomed: set[UUID] = set()  # discarded while pinned: evicted at the last unpin
        self._pins: dict[UUID, int] = {}
        self._downloads: dict[UUID, asyncio.Task[int]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._adopt_existing()

    def __contains__(self, version_id: object) -> bool:
        """Whether the version is on disk now."""
        return version_id in self._sizes

    def follow_policy(self) -> None:
        """Leave eviction to the policy core's `discard` calls (see the module).

        What is on disk now came from an earlier process: the cache's own LRU keeps only
        those, until each is asked for again (then the core has placed it) or evicted.
        """
        self._policy_decides = True

    def path_of(self, version_id: UUID) -> Path:
        """The directory a version's files live in (whether or not it is cached)."""
        return self.root / str(version_id)

    async def ensure(
        self, version_id: UUID, storage_key_prefix: str, files: dict[str, str]
    ) -> Path:
        """The version's directory, downloading `files` (name -> sha256) on a miss.

        The path is not pinned: hold `use()` instead while something reads the files.
        """
        async with self.use(version_id, storage_key_prefix, files) as path:
            return path

    @contextlib.asynccontextmanager
    async def use(
        self, version_id: UUID, storage_key_prefix: str, files: dict[str, str]
    ) -> AsyncIterator[Path]:
        """Ensure the version is on disk and keep it there (pinned) inside the block."""
        files = {_plain_name(name): sha256 for name, sha256 in files.items()}
        self._doomed.discard(version_id)  # asked for again: a pending discard is void
        # Pin before awaiting: a download that lands in the meantime may evict, and must
        # not pick the version this caller is about to read.
        self._pins[version_id] = self._pins.get(version_id, 0) + 1
        try:
            await self._fetch(version_id, storage_key_prefix, files)
            yield self.path_of(version_id)
        finally:
            self._unpin(version_id)

    async def check_fetchable(
        self, version_id: UUID, storage_key_prefix: str, files: dict[str, str]
    ) -> bool:
        """True if the version is on disk; else False once the store has answered for each
        of its files (one HEAD each). Raises the store's errors: StoreUnavailable while it
        is down, ObjectMissing for a file it lacks."""
        if version_id in self._sizes:
            return True
        keys = [storage_key_prefix + _plain_name(name) for name in files]
        missing = await asyncio.to_thread(lambda: [k for k in keys if not self.store.exists(k)])
        if missing:
            raise ObjectMissing(f"no stored object {missing[0]}")
        return False

    def pin(self, version_id: UUID) -> None:
        """Keep the version on disk until `unpin` (an engine that may re-read it holds it)."""
        self._pins[version_id] = self._pins.get(version_id, 0) + 1

    def unpin(self, version_id: UUID) -> None:
        """Undo one `pin`; the cache may evict the version again once nothing pins it."""
        if self._pins.get(version_id, 0) > 0:
            self._unpin(version_id)

    def is_pinned(self, version_id: UUID) -> bool:
        """Whether someone is using the version right now."""
        return self._pins.get(version_id, 0) > 0

    def discard(self, version_id: UUID) -> bool:
        """Evict one version now (the policy chose it); False if pinned or absent.

        Following the policy, a pinned version is evicted when its last pin goes instead.
        """
        if version_id not in self._sizes:
            return False
        if self.is_pinned(version_id):
            if self._policy_decides:
                self._doomed.add(version_id)
            return False
        self._evict(version_id)
        return True

    async def aclose(self) -> None:
        """Wait for background removals of evicted versions."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def _fetch(self, version_id: UUID, prefix: str, files: dict[str, str]) -> None:
        if version_id in self._sizes:
            self.hits += 1
            if self._policy_decides:  # the core placed it: no longer a leftover
                self._evictor.on_remove(str(version_id))
            else:
                self._evictor.on_access(str(version_id), 0.0)
            return
        self.misses += 1
        task = self._downloads.get(version_id)
        if task is None:
            self.downloads += 1
            task = asyncio.create_task(self._download(version_id, prefix, dict(files)))
            self._downloads[version_id] = task
            task.add_done_callback(lambda done: self._download_finished(version_id, done))
        # Shielded: a waiter that gives up (client gone) must not cancel the shared download.
        await asyncio.shield(task)

    def _download_finished(self, version_id: UUID, task: asyncio.Task[int]) -> None:
        if self._downloads.get(version_id) is task:  # not a retry started since
            del self._downloads[version_id]

    async def _download(self, version_id: UUID, prefix: str, files: dict[str, str]) -> int:
        """Fetch into `.incoming`, make room, then land: the cache proper never holds a
        new version before its victims are gone (only pins keep it over budget)."""
        incoming, size = await asyncio.to_thread(self._fetch_incoming, version_id, prefix, files)
        try:
            self._evict_over_budget(arriving=size)
            self._land(version_id, incoming)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, incoming, True)
            raise
        self._add(version_id, size)
        self._evict_over_budget()
        return size

    def _fetch_incoming(
        self, version_id: UUID, prefix: str, files: dict[str, str]
    ) -> tuple[Path, int]:
        """Every file into a fresh folder under `.incoming`; the folder and its size."""
        incoming = self.root / INCOMING / f"{version_id}.{uuid.uuid4().hex}"
        incoming.mkdir(parents=True)
        try:
            for name, sha256 in files.items():
                self.store.get_file(prefix + name, incoming / name, sha256)
            return incoming, sum(p.stat().st_size for p in incoming.iterdir())
        except BaseException:
            shutil.rmtree(incoming, ignore_errors=True)
            raise

    def _land(self, version_id: UUID, incoming: Path) -> None:
        """Rename a complete download into place (one rename: instant)."""
        target = self.path_of(version_id)
        if target.exists():  # a stray copy not in the index (e.g. removed by hand midway)
            self._move_to_trash(target)
        os.replace(incoming, target)

    def _unpin(self, version_id: UUID) -> None:
        remaining = self._pins.get(version_id, 0) - 1
        if remaining > 0:
            self._pins[version_id] = remaining
            return
        self._pins.pop(version_id, None)
        if version_id in self._doomed:  # the policy evicted it while it was in use
            self._doomed.discard(version_id)
            if version_id in self._sizes:
                self._evict(version_id)
        self._evict_over_budget()  # the cache may be over budget because this was pinned

    def _evict_over_budget(self, arriving: int = 0) -> None:
        """Evict the evictor's unpinned victims until the budget holds (with room for
        `arriving` bytes about to land) or it has none."""
        budget = self.budget_bytes - arriving
        while self.used_bytes > budget:
            victim = self._evictor.choose_victim(self._unpinned)
            if victim is None:
                break
            self._evict(UUID(victim))
        if self._policy_decides and self.used_bytes > budget:
            self._enforce_hard_cap(budget)
        if self.used_bytes > budget and not arriving:
            used = self.used_bytes
            log.info("disk cache over budget (%d > %d): the rest is pinned", used, budget)

    def _enforce_hard_cap(self, budget: int) -> None:
        """The safety stop under the policy core: the core budgets the disk per engine and
        per base model, so several local engines or base models sharing this one cache can
        together place more than it holds. Then the oldest unpinned copies go (a version
        the core still counts on disk is downloaded again when next used), and the log says
        the budget is shared too thinly."""
        # Versions the core already evicted, waiting for their last reader, are as good as
        # gone: counting them would evict a second version for the core's one.
        leaving = sum(self._sizes[v] for v in self._doomed if v in self._sizes)
        for version_id in [v for v in self._sizes if not self.is_pinned(v)]:
            if self.used_bytes - leaving <= budget:
                return
            log.warning(
                "disk cache over its budget under the policy core (several local engines or "
                "base models share it): evicting %s, oldest first",
                version_id,
            )
            self._evict(version_id)

    def _unpinned(self, key: str) -> bool:
        return not self.is_pinned(UUID(key))

    def _add(self, version_id: UUID, size: int) -> None:
        self._sizes[version_id] = size
        self.used_bytes += size
        if not self._policy_decides:
            self._evictor.on_insert(str(version_id), 0.0)

    def _evict(self, version_id: UUID) -> None:
        self.used_bytes -= self._sizes.pop(version_id)
        self._doomed.discard(version_id)
        self._evictor.on_remove(str(version_id))  # a no-op for its own victims
        self.evictions += 1
        # Rename now (instant, so a re-download can take the name at once); delete later.
        trashed = self._move_to_trash(self.path_of(version_id))
        if trashed is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the event loop: remove inline
            shutil.rmtree(trashed, ignore_errors=True)
            return
        task = loop.create_task(asyncio.to_thread(shutil.rmtree, trashed, True))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _move_to_trash(self, path: Path) -> Path | None:
        trash = self.root / TRASH
        trash.mkdir(parents=True, exist_ok=True)
        target = trash / f"{path.name}.{uuid.uuid4().hex}"
        try:
            os.replace(path, target)
        except FileNotFoundError:
            return None
        return target

    def _adopt_existing(self) -> None:
        """Index versions left by a previous process (complete by construction), oldest first."""
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in (INCOMING, TRASH):
            shutil.rmtree(self.root / leftover, ignore_errors=True)
        found: list[tuple[float, UUID, int]] = []
        for entry in self.root.iterdir():
            version_id = _as_uuid(entry.name)
            if version_id is None or not entry.is_dir():
                continue
            size = sum(p.stat().st_size for p in entry.iterdir() if p.is_file())
            found.append((entry.stat().st_mtime, version_id, size))
        for _, version_id, size in sorted(found):  # oldest first: the first victims
            self._add(version_id, size)


def _plain_name(name: str) -> str:
    """A file name from version metadata, refused if it could leave the version's folder."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"not a plain file name: {name!r}")
    return name


def _as_uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None
