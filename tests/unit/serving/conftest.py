"""Fixtures shared by the serving tests: a cluster over a store, and an agent's node."""

from __future__ import annotations

from pathlib import Path

import pytest

from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.registry import EngineHandle
from tests.support.fake_driver import FakeDriver
from tests.support.live_cluster import BASE, Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """Versions in a store (modules that need another eviction policy override this)."""
    return Cluster(tmp_path)


@pytest.fixture
def node_engine() -> EngineHandle:
    """The engine beside a node agent."""
    driver = FakeDriver(url="http://node-engine")
    return EngineHandle("n1", "n1", driver.url, "vllm", BASE, 64, 1, 2, driver, healthy=True)


@pytest.fixture
def node_cache(cluster: Cluster, tmp_path: Path) -> DiskCache:
    """A node agent's own disk cache over the cluster's store."""
    return DiskCache(tmp_path / "node-cache", 10**9, cluster.store)
