"""A failed adapter load shows on /metrics, where the adapter-load alert reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from loraplex.serving.live import LiveConfig
from tests.support.live_cluster import BASE, Cluster


def _failed_loads() -> float:
    return sum(
        REGISTRY.get_sample_value("loraplex_adapter_loads_total", {"tier": tier, "result": "error"})
        or 0.0
        for tier in ("disk", "loaded")
    )


async def test_a_load_that_fails_counts_as_an_error(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, LiveConfig())
    cluster.engine()
    broken = cluster.version()
    cluster.store.delete_prefix(broken.storage_key)
    before = _failed_loads()
    with pytest.raises(Exception):  # noqa: B017 - whatever the store raises for a missing file
        await cluster.placement.acquire(BASE, broken.version_id)
    assert _failed_loads() == before + 1
    await cluster.serve(cluster.version())
    assert _failed_loads() == before + 1  # a load that works is no error
