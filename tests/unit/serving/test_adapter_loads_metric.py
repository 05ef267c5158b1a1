"""`loraplex_adapter_loads` counts loads made, by tier, not requests."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from loraplex.gateway.resolve import Target
from loraplex.gateway.routing import EngineRouter
from loraplex.serving.live import LiveConfig, VersionFacts
from tests.support.live_cluster import BASE, Cluster

TIERS = ("disk", "loaded", "active")


def _loads() -> dict[str, float]:
    return {
        tier: REGISTRY.get_sample_value(
            "loraplex_adapter_loads_total", {"tier": tier, "result": "ok"}
        )
        or 0.0
        for tier in TIERS
    }


def _added(before: dict[str, float]) -> dict[str, float]:
    return {tier: count - before[tier] for tier, count in _loads().items()}


async def test_a_cold_adapter_adds_one_load_per_tier(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, LiveConfig())
    cluster.engine()
    before = _loads()
    await cluster.serve(cluster.version())
    assert _added(before) == {"disk": 1, "loaded": 1, "active": 1}


async def _route(cluster: Cluster, facts: VersionFacts) -> str:
    """One request through the gateway's router; where it found its adapter."""
    router = EngineRouter(cluster.registry, cluster.cache, cluster.placement)
    target = Target(BASE, BASE, 1024, BASE, facts.version_id, facts.storage_key, rank=facts.rank)
    ready = await router.prepare(target)
    assert ready is not None
    ready.release()
    return ready.tier


async def test_a_request_to_a_hot_adapter_adds_no_load(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, LiveConfig())
    cluster.engine()
    hot = cluster.version()
    assert await _route(cluster, hot) == "cold"
    before = _loads()
    for _ in range(3):
        assert await _route(cluster, hot) == "loaded"
    assert _added(before) == {"disk": 0, "loaded": 0, "active": 0}


async def test_an_adapter_back_from_disk_adds_only_an_engine_load(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, LiveConfig())
    cluster.engine(host_slots=1)
    first, second = cluster.version(), cluster.version()
    await cluster.serve(first)
    await cluster.serve(second)  # evicts `first` from the engine; its disk copy stays
    before = _loads()
    await cluster.serve(first)
    assert _added(before) == {"disk": 0, "loaded": 1, "active": 1}
