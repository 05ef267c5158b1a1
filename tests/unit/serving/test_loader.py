"""Making a version loaded on an engine: internal names, tiers, one load at a time."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from loraplex.adapters.store import LocalStore
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.engines import EngineUnavailable
from loraplex.serving.loader import (
    engine_adapter_name,
    ensure_on_engine,
    version_id_from_engine_name,
)
from loraplex.serving.policy import Tier
from loraplex.serving.registry import EngineHandle
from tests.support.fake_driver import FakeDriver


class Stored:
    """One version in a local store."""

    def __init__(self, store: LocalStore, scratch: Path) -> None:
        self.id = uuid.uuid4()
        self.prefix = f"adapters/t/a/{self.id}/"
        self.files = {}
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            source = scratch / f"{self.id}-{name}"
            source.write_bytes(self.id.bytes * 10)
            self.files[name] = store.put_file(self.prefix + name, source).sha256


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    """A local object store."""
    return LocalStore(tmp_path / "store")


@pytest.fixture
def version(store: LocalStore, tmp_path: Path) -> Stored:
    """A version in the store."""
    return Stored(store, tmp_path)


@pytest.fixture
def cache(tmp_path: Path, store: LocalStore) -> DiskCache:
    """A roomy disk cache."""
    return DiskCache(tmp_path / "cache", 10**9, store)


@pytest.fixture
def driver() -> FakeDriver:
    """An engine that answers."""
    return FakeDriver()


@pytest.fixture
def handle(driver: FakeDriver) -> EngineHandle:
    """The engine's handle."""
    return EngineHandle("e", "e", driver.url, "vllm", "tiny", 16, 2, 4, driver, healthy=True)


async def place(handle: EngineHandle, version: Stored, cache: DiskCache):
    """ensure_on_engine for the version."""
    return await ensure_on_engine(handle, version.id, version.prefix, version.files, cache)


def test_engine_names_come_from_the_version_id_only() -> None:
    version_id = uuid.uuid4()
    name = engine_adapter_name(version_id)
    assert name == "lpx-" + version_id.hex
    assert version_id_from_engine_name(name) == version_id


@pytest.mark.parametrize("name", ["my-adapter", "lpx-not-hex", "lpx-", ""])
def test_names_loraplex_did_not_make_map_to_no_version(name: str) -> None:
    assert version_id_from_engine_name(name) is None


async def test_a_cold_version_is_downloaded_and_loaded(handle, driver, version, cache) -> None:
    placement = await place(handle, version, cache)
    assert (placement.tier, placement.tier_label) == (Tier.COLD, "cold")
    assert driver.loads == [placement.name]
    assert placement.name in handle.loaded
    assert driver.files_seen_at_load[placement.name] == sorted(version.files)


async def test_a_version_on_disk_is_loaded_from_disk(handle, version, cache) -> None:
    await cache.ensure(version.id, version.prefix, version.files)
    assert (await place(handle, version, cache)).tier is Tier.DISK


async def test_a_loaded_version_is_not_loaded_again(handle, driver, version, cache) -> None:
    await place(handle, version, cache)
    placement = await place(handle, version, cache)
    assert placement.tier is Tier.LOADED
    assert len(driver.loads) == 1


async def test_concurrent_requests_share_one_engine_load(handle, driver, version, cache) -> None:
    driver.load_gate = asyncio.Event()
    waiting = [asyncio.create_task(place(handle, version, cache)) for _ in range(4)]
    await asyncio.sleep(0)
    driver.load_gate.set()
    placements = await asyncio.gather(*waiting)
    assert {p.name for p in placements} == {engine_adapter_name(version.id)}
    assert len(driver.loads) == 1


async def test_a_failed_load_marks_nothing_loaded(handle, driver, version, cache) -> None:
    driver.up = False
    with pytest.raises(EngineUnavailable):
        await place(handle, version, cache)
    assert handle.loaded == set()
    assert handle.loading == {}
    driver.up = True
    assert (await place(handle, version, cache)).tier is Tier.DISK  # the download was kept
