"""The node disk cache: verified downloads, one download per version, LRU by bytes, pins."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from uuid import UUID

import pytest

from loraplex.adapters.errors import ObjectCorrupt
from loraplex.adapters.store import LocalStore
from loraplex.serving.disk_cache import DiskCache

FILE_BYTES = 1000  # each of a version's two files
VERSION_BYTES = 2 * FILE_BYTES


class CountingStore(LocalStore):
    """A local store that counts downloads."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets: list[str] = []

    def get_file(self, key: str, dest: Path, expected_sha256: str) -> None:
        """Count, then download."""
        self.gets.append(key)
        super().get_file(key, dest, expected_sha256)


class Version:
    """A version uploaded to the store: its id, key prefix and file checksums."""

    def __init__(self, store: LocalStore, scratch: Path) -> None:
        self.id = uuid.uuid4()
        self.prefix = f"adapters/t/a/{self.id}/"
        self.contents = {
            "adapter_config.json": b"{" + self.id.bytes.hex().encode() * 30,
            "adapter_model.safetensors": self.id.bytes * 62,
        }
        self.files: dict[str, str] = {}
        for name, content in self.contents.items():
            content = content[:FILE_BYTES].ljust(FILE_BYTES, b" ")
            self.contents[name] = content
            source = scratch / f"{self.id}-{name}"
            source.write_bytes(content)
            self.files[name] = store.put_file(self.prefix + name, source).sha256


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    """An empty local object store."""
    return CountingStore(tmp_path / "store")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A folder for files on their way into the store."""
    (tmp_path / "scratch").mkdir()
    return tmp_path / "scratch"


def upload(store: LocalStore, scratch: Path) -> Version:
    """A fresh version in the store."""
    return Version(store, scratch)


def make_cache(tmp_path: Path, store: LocalStore, versions_fitting: int = 10) -> DiskCache:
    """A cache whose budget holds exactly `versions_fitting` versions."""
    return DiskCache(tmp_path / "cache", versions_fitting * VERSION_BYTES, store)


async def ensure(cache: DiskCache, version: Version) -> Path:
    """Ensure a version is cached."""
    return await cache.ensure(version.id, version.prefix, version.files)


def policy_cache(tmp_path: Path, store: LocalStore, versions_fitting: int = 10) -> DiskCache:
    """A cache that leaves eviction to the policy core, as live placement's does."""
    cache = make_cache(tmp_path, store, versions_fitting)
    cache.follow_policy()
    return cache


def on_disk(cache: DiskCache, version_id: UUID) -> bool:
    """Whether the version's folder exists."""
    return cache.path_of(version_id).is_dir()


async def test_a_miss_downloads_the_versions_files(tmp_path, store, scratch) -> None:
    version = upload(store, scratch)
    cache = make_cache(tmp_path, store)
    path = await ensure(cache, version)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == version.contents
    assert (cache.misses, cache.hits, cache.used_bytes) == (1, 0, VERSION_BYTES)


async def test_a_hit_downloads_nothing(tmp_path, store, scratch) -> None:
    version = upload(store, scratch)
    cache = make_cache(tmp_path, store)
    await ensure(cache, version)
    store.gets.clear()
    await ensure(cache, version)
    assert store.gets == []
    assert cache.hits == 1


async def test_a_corrupt_object_fails_and_leaves_nothing_cached(tmp_path, store, scratch) -> None:
    version = upload(store, scratch)
    cache = make_cache(tmp_path, store)
    wrong = {**version.files, "adapter_model.safetensors": "0" * 64}
    with pytest.raises(ObjectCorrupt):
        await cache.ensure(version.id, version.prefix, wrong)
    assert version.id not in cache
    assert not on_disk(cache, version.id)
    assert cache.used_bytes == 0
    assert list((cache.root / ".incoming").iterdir()) == []


async def test_a_failed_download_is_retried_by_the_next_ensure(tmp_path, store, scratch) -> None:
    version = upload(store, scratch)
    cache = make_cache(tmp_path, store)
    with pytest.raises(ObjectCorrupt):
        await cache.ensure(version.id, version.prefix, {"adapter_config.json": "0" * 64})
    path = await ensure(cache, version)
    assert sorted(p.name for p in path.iterdir()) == sorted(version.files)


async def test_concurrent_ensures_of_a_version_share_one_download(tmp_path, store, scratch) -> None:
    version = upload(store, scratch)
    cache = make_cache(tmp_path, store)
    paths = await asyncio.gather(*(ensure(cache, version) for _ in range(5)))
    assert len(set(paths)) == 1
    assert sorted(store.gets) == sorted(version.prefix + name for name in version.files)
    assert cache.downloads == 1


async def test_the_least_recently_used_version_is_evicted_over_budget(
    tmp_path, store, scratch
) -> None:
    first, second, third = (upload(store, scratch) for _ in range(3))
    cache = make_cache(tmp_path, store, versions_fitting=2)
    await ensure(cache, first)
    await ensure(cache, second)
    await ensure(cache, first)  # first is now the most recently used
    await ensure(cache, third)
    await cache.aclose()
    assert (first.id in cache, second.id in cache, third.id in cache) == (True, False, True)
    assert not on_disk(cache, second.id)
    assert (cache.evictions, cache.used_bytes) == (1, 2 * VERSION_BYTES)


async def test_a_version_in_use_is_never_evicted(tmp_path, store, scratch) -> None:
    busy, other = upload(store, scratch), upload(store, scratch)
    cache = make_cache(tmp_path, store, versions_fitting=1)
    async with cache.use(busy.id, busy.prefix, busy.files) as path:
        await ensure(cache, other)
        await cache.aclose()
        assert busy.id in cache
        assert sorted(p.name for p in path.iterdir()) == sorted(busy.files)


async def test_a_released_version_is_evicted_if_the_cache_is_over_budget(
    tmp_path, store, scratch
) -> None:
    busy, other = upload(store, scratch), upload(store, scratch)
    cache = make_cache(tmp_path, store, versions_fitting=1)
    async with (
        cache.use(busy.id, busy.prefix, busy.files),
        cache.use(other.id, other.prefix, other.files),
    ):
        assert cache.used_bytes == 2 * VERSION_BYTES  # both pinned: over budget for now
    assert cache.used_bytes <= cache.budget_bytes


async def test_a_pinned_version_cannot_be_discarded(tmp_path, store, scratch) -> None:
    version = upload(store, scratch)
    cache = make_cache(tmp_path, store)
    async with cache.use(version.id, version.prefix, version.files):
        assert not cache.discard(version.id)
    assert cache.discard(version.id)
    assert version.id not in cache


async def test_versions_cached_by_a_previous_process_are_reused(tmp_path, store, scratch) -> None:
    version = upload(store, scratch)
    await ensure(make_cache(tmp_path, store), version)
    store.gets.clear()
    restarted = make_cache(tmp_path, store)
    await ensure(restarted, version)
    assert store.gets == []
    assert restarted.used_bytes == VERSION_BYTES


async def test_a_file_name_that_leaves_the_version_folder_is_refused(tmp_path, store) -> None:
    cache = make_cache(tmp_path, store)
    with pytest.raises(ValueError, match="plain file name"):
        await cache.ensure(uuid.uuid4(), "adapters/x/", {"../escape": "0" * 64})


async def test_following_the_policy_a_version_the_core_evicted_in_use_costs_no_other(
    tmp_path, store, scratch
) -> None:
    held, other, new = (upload(store, scratch) for _ in range(3))
    cache = policy_cache(tmp_path, store, versions_fitting=2)
    await ensure(cache, other)
    async with cache.use(held.id, held.prefix, held.files):
        assert not cache.discard(held.id)  # the core evicted it; an engine still reads it
        await ensure(cache, new)  # over budget only until that read ends
        assert (other.id in cache, new.id in cache) == (True, True)
    await cache.aclose()
    assert [v.id in cache for v in (held, other, new)] == [False, True, True]
    assert cache.evictions == 1


async def test_following_the_policy_a_cache_shared_past_its_budget_drops_its_oldest(
    tmp_path, store, scratch
) -> None:
    # Two local engines, each given the whole budget by the core, share one cache.
    oldest, middle, newest = (upload(store, scratch) for _ in range(3))
    cache = policy_cache(tmp_path, store, versions_fitting=2)
    for version in (oldest, middle, newest):
        await ensure(cache, version)
    await cache.aclose()
    assert [v.id in cache for v in (oldest, middle, newest)] == [False, True, True]
    assert cache.used_bytes == 2 * VERSION_BYTES


@pytest.mark.parametrize("follows_policy", [True, False], ids=["policy", "standalone"])
async def test_a_version_discarded_in_use_goes_on_release_only_under_the_policy(
    tmp_path, store, scratch, follows_policy: bool
) -> None:
    version = upload(store, scratch)
    cache = policy_cache(tmp_path, store) if follows_policy else make_cache(tmp_path, store)
    async with cache.use(version.id, version.prefix, version.files):
        assert not cache.discard(version.id)
        assert version.id in cache
    await cache.aclose()
    assert (version.id in cache, on_disk(cache, version.id)) == (not follows_policy,) * 2


async def test_a_discard_waiting_for_a_release_is_void_once_the_version_is_asked_for_again(
    tmp_path, store, scratch
) -> None:
    version = upload(store, scratch)
    cache = policy_cache(tmp_path, store)
    cache.pin(version.id)
    await ensure(cache, version)
    assert not cache.discard(version.id)
    await ensure(cache, version)  # the policy placed it again
    cache.unpin(version.id)
    assert version.id in cache


async def test_following_the_policy_copies_left_by_a_previous_process_go_first(
    tmp_path, store, scratch
) -> None:
    left, placed, again, new = (upload(store, scratch) for _ in range(4))
    for version in (left, again):
        await ensure(make_cache(tmp_path, store), version)
    cache = policy_cache(tmp_path, store, versions_fitting=3)
    await ensure(cache, again)  # asked for again: the policy holds it now
    await ensure(cache, placed)
    await ensure(cache, new)
    await cache.aclose()
    assert [v.id in cache for v in (left, again, placed, new)] == [False, True, True, True]
    assert cache.evictions == 1


class GatedStore(CountingStore):
    """A store whose downloads all wait until `release` is set (downloads in flight at once)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.release = threading.Event()

    def get_file(self, key: str, dest: Path, expected_sha256: str) -> None:
        """Wait for the gate, then download."""
        self.release.wait(timeout=10)
        super().get_file(key, dest, expected_sha256)


def cached_bytes(cache: DiskCache) -> int:
    """Bytes in the cache proper: downloads still in `.incoming` and the trash left out."""
    return sum(
        f.stat().st_size
        for folder in cache.root.iterdir()
        if not folder.name.startswith(".")
        for f in folder.iterdir()
    )


async def test_downloads_landing_together_never_put_the_cache_past_its_budget(
    tmp_path, scratch
) -> None:
    """Each download waits in `.incoming` until its victim is gone: however many land at
    once, the cache proper never holds more than its budget but for versions still in use
    (the soak drill once saw two adapters over it when two landed before either victim
    left)."""
    store = GatedStore(tmp_path / "store")
    store.release.set()
    cache = make_cache(tmp_path, store, versions_fitting=2)
    for version in (upload(store, scratch), upload(store, scratch)):
        await ensure(cache, version)
    store.release.clear()
    seen: list[int] = []
    land = cache._land

    def land_and_measure(version_id: UUID, incoming: Path) -> None:
        land(version_id, incoming)
        in_use = [v for v in arriving if v.id != version_id and cache.is_pinned(v.id)]
        in_use_bytes = sum(VERSION_BYTES for v in in_use if v.id in cache)
        seen.append(cached_bytes(cache) - in_use_bytes)

    arriving = [upload(store, scratch) for _ in range(3)]
    cache._land = land_and_measure  # type: ignore[method-assign]
    downloads = [asyncio.create_task(ensure(cache, v)) for v in arriving]
    await asyncio.sleep(0.05)  # all three in flight
    store.release.set()
    await asyncio.gather(*downloads)
    await cache.aclose()
    assert len(seen) == 3
    assert max(seen) <= 2 * VERSION_BYTES
