"""Live placement follows pinned aliases read from the facts source (the database in production)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loraplex.serving.live import LiveConfig, VersionFacts
from loraplex.serving.policy import PolicyConfig, TenantPlan
from tests.support.live_cluster import Cluster, loaded, name_of


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """LRU eviction, and pinned aliases read on every reconcile round."""
    return Cluster(tmp_path, LiveConfig(policy=PolicyConfig(eviction="lru"), pin_sync_every_s=0))


def is_pinned(cluster: Cluster, version: VersionFacts) -> bool:
    """Whether every policy core holds the version pinned."""
    pools = cluster.placement.pools.values()
    return bool(pools) and all(str(version.version_id) in p.core.cluster.pinned for p in pools)


async def test_a_version_a_pinned_alias_points_at_is_pinned(cluster: Cluster) -> None:
    cluster.engine()
    version = cluster.version()
    await cluster.serve(version)
    cluster.facts.pinned = {version.version_id}
    await cluster.placement.reconcile_all()
    assert is_pinned(cluster, version)


async def test_the_pin_follows_the_alias_when_it_moves(cluster: Cluster) -> None:
    cluster.engine()
    old, new = cluster.version(), cluster.version()
    await cluster.serve(old)
    cluster.facts.pinned = {old.version_id}
    await cluster.placement.reconcile_all()
    await cluster.serve(new)
    cluster.facts.pinned = {new.version_id}
    await cluster.placement.reconcile_all()
    assert is_pinned(cluster, new) and not is_pinned(cluster, old)


async def test_an_unpinned_alias_lets_its_version_be_evicted(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=2)
    version, *others = (cluster.version() for _ in range(3))
    await cluster.serve(version)
    cluster.facts.pinned = {version.version_id}
    await cluster.placement.reconcile_all()
    cluster.facts.pinned = set()
    await cluster.placement.reconcile_all()
    assert not is_pinned(cluster, version)
    for other in others:
        await cluster.serve(other)
    assert name_of(version) not in loaded(engine)


async def test_a_pinned_alias_keeps_its_version_loaded_under_pressure(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=2)
    pinned, *others = (cluster.version() for _ in range(4))
    cluster.facts.pinned = {pinned.version_id}
    await cluster.placement.reconcile_all()  # no pool yet: the pin applies once it registers
    await cluster.serve(pinned)
    for other in others * 2:
        await cluster.serve(other)
        assert name_of(pinned) in loaded(engine)


async def test_alias_pins_are_not_limited_again_by_version_count(cluster: Cluster) -> None:
    """The control plane counts pinned aliases; an alias's canary adds a version, not a pin."""
    cluster.engine(host_slots=4)
    tenant = cluster.version().tenant_id
    cluster.facts.plans[tenant] = TenantPlan(max_pins=1)
    target, canary = cluster.version(tenant), cluster.version(tenant)
    for version in (target, canary):
        await cluster.serve(version)
    cluster.facts.pinned = {target.version_id, canary.version_id}
    await cluster.placement.reconcile_all()
    assert is_pinned(cluster, target) and is_pinned(cluster, canary)


async def test_an_operator_unpin_keeps_a_version_a_pinned_alias_holds(cluster: Cluster) -> None:
    cluster.engine()
    version = cluster.version()
    await cluster.serve(version)
    assert await cluster.placement.pin(version.version_id)
    cluster.facts.pinned = {version.version_id}
    await cluster.placement.reconcile_all()
    cluster.placement.unpin(version.version_id)
    assert is_pinned(cluster, version)


async def test_pinned_aliases_are_read_at_most_every_pin_sync_interval(tmp_path: Path) -> None:
    now = [100.0]
    cluster = Cluster(tmp_path, LiveConfig(pin_sync_every_s=5.0))
    cluster.placement.clock = lambda: now[0]
    cluster.engine()
    version = cluster.version()
    await cluster.serve(version)
    await cluster.placement.reconcile_all()  # the first round reads (nothing pinned yet)
    cluster.facts.pinned = {version.version_id}
    now[0] += 1.0
    await cluster.placement.reconcile_all()
    assert not is_pinned(cluster, version)
    now[0] += 4.0
    await cluster.placement.reconcile_all()
    assert is_pinned(cluster, version)
