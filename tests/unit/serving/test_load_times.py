"""The last few engine loads of each version: recorded as loads finish, bounded per version
and in the number of versions kept."""

from __future__ import annotations

from datetime import UTC, datetime

from loraplex.serving.live.load_times import LoadTime, LoadTimes
from tests.support.live_cluster import Cluster


def _load(seconds: float) -> LoadTime:
    return LoadTime("e1", "cold", seconds, datetime(2026, 1, 1, tzinfo=UTC))


async def test_a_served_version_remembers_how_long_its_load_took(cluster: Cluster) -> None:
    cluster.engine(name="e1")
    version = cluster.version()
    await cluster.serve(version)
    (load,) = cluster.placement.recent_loads(version.version_id)
    assert load.engine == "e1" and load.came_from in ("cold", "disk") and load.seconds >= 0
    assert cluster.placement.recent_loads(cluster.version().version_id) == []


def test_each_version_keeps_its_newest_loads_first() -> None:
    times = LoadTimes(per_version=2)
    for seconds in (1.0, 2.0, 3.0):
        times.record("v", _load(seconds))
    assert [load.seconds for load in times.of("v")] == [3.0, 2.0]


def test_the_least_recently_loaded_version_is_forgotten_first() -> None:
    times = LoadTimes(versions=2)
    for version in ("a", "b", "a", "c"):
        times.record(version, _load(1.0))
    assert times.of("b") == [] and len(times.of("a")) == 2 and len(times.of("c")) == 1
