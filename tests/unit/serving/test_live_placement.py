"""LivePlacement over fake engines: loads, evictions, pins, queue bound, refusals, reconcile."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from loraplex.serving.live import ColdLoadLimited, LiveConfig, PlacementDeferred
from loraplex.serving.policy import PolicyConfig, TenantPlan, Tier
from tests.support.live_cluster import BASE, Cluster, loaded, name_of, settle


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """A cluster with LRU eviction, so the expected victim is easy to name."""
    return Cluster(tmp_path, LiveConfig(policy=PolicyConfig(eviction="lru")))


async def test_a_request_loads_its_adapter_from_the_store(cluster: Cluster) -> None:
    engine = cluster.engine()
    version = cluster.version()
    seat = await cluster.placement.acquire(BASE, version.version_id)
    assert seat is not None and seat.engine is engine
    assert seat.tier is Tier.COLD
    assert loaded(engine) == {name_of(version)}
    seat.release()


async def test_engine_never_holds_more_adapters_than_its_host_slots(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=2)
    versions = [cluster.version() for _ in range(5)]
    for version in versions * 2:
        await cluster.serve(version)
        assert len(loaded(engine)) <= 2
    assert cluster.placement.runner.unloads >= 8


async def test_the_least_recently_used_adapter_is_unloaded_under_lru(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=2)
    a, b, c = (cluster.version() for _ in range(3))
    for version in (a, b, a, c):
        await cluster.serve(version)
    assert loaded(engine) == {name_of(a), name_of(c)}


async def test_a_pinned_adapter_stays_loaded(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=2)
    pinned, *others = (cluster.version() for _ in range(4))
    assert await cluster.placement.pin(pinned.version_id)
    await cluster.serve(pinned)
    for version in others * 2:
        await cluster.serve(version)
        assert name_of(pinned) in loaded(engine)


async def test_pins_beyond_the_plan_are_refused(cluster: Cluster) -> None:
    tenant = uuid.uuid4()
    cluster.facts.plans[tenant] = TenantPlan(max_pins=1)
    first, second = cluster.version(tenant), cluster.version(tenant)
    assert await cluster.placement.pin(first.version_id)
    assert not await cluster.placement.pin(second.version_id)


async def test_an_adapter_with_a_request_in_flight_is_not_unloaded(cluster: Cluster) -> None:
    engine = cluster.engine(gpu_slots=2, host_slots=2)
    busy, *others = (cluster.version() for _ in range(4))
    seat = await cluster.placement.acquire(BASE, busy.version_id)
    assert seat is not None
    for version in others:
        await cluster.serve(version)
        assert name_of(busy) in loaded(engine)
    seat.release()


async def test_requests_beyond_the_engine_queue_bound_wait_for_a_release(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, LiveConfig(running_per_gpu_slot=2))
    cluster.engine(gpu_slots=1)
    version = cluster.version()
    first = await cluster.placement.acquire(BASE, version.version_id)
    second = await cluster.placement.acquire(BASE, version.version_id)
    third = asyncio.create_task(cluster.placement.acquire(BASE, version.version_id))
    await settle(cluster.placement)
    assert first is not None and second is not None and not third.done()
    first.release()
    seat = await third
    assert seat is not None


async def test_a_caller_that_gives_up_while_queued_leaks_no_room(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, LiveConfig(running_per_gpu_slot=1))
    cluster.engine(gpu_slots=1)
    version = cluster.version()
    first = await cluster.placement.acquire(BASE, version.version_id)
    waiting = asyncio.create_task(cluster.placement.acquire(BASE, version.version_id))
    await settle(cluster.placement)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert first is not None
    first.release()
    again = await cluster.placement.acquire(BASE, version.version_id)
    assert again is not None


@pytest.mark.parametrize(
    ("max_defer_s", "refusal", "status"),
    [(0.0, ColdLoadLimited, 429), (600.0, PlacementDeferred, 503)],
    ids=["refused-at-once-429", "deferred-past-the-queue-timeout-503"],
)
async def test_a_tenant_over_its_cold_load_budget_is_refused(
    tmp_path: Path, max_defer_s: float, refusal: type[Exception], status: int
) -> None:
    policy = PolicyConfig(cold_load_burst=1, max_defer_s=max_defer_s)
    cluster = Cluster(tmp_path, LiveConfig(policy=policy, queue_timeout_s=5.0))
    cluster.engine(host_slots=4)
    tenant = uuid.uuid4()
    cluster.facts.plans[tenant] = TenantPlan(cold_loads_per_minute=1)
    first, second, third = (cluster.version(tenant) for _ in range(3))
    await cluster.serve(first)
    await cluster.serve(second)
    with pytest.raises(refusal) as refused:
        await cluster.placement.acquire(BASE, third.version_id)
    assert refused.value.status_code == status  # type: ignore[attr-defined]
    assert int(refused.value.headers["Retry-After"]) > 0  # type: ignore[attr-defined]


async def test_an_engine_restart_makes_the_next_request_reload(cluster: Cluster) -> None:
    engine = cluster.engine()
    version = cluster.version()
    await cluster.serve(version)
    engine.driver.restart()  # type: ignore[attr-defined]
    engine.loaded = set()  # what the health poller reads back from a restarted engine
    await cluster.placement.reconcile_all()
    seat = await cluster.placement.acquire(BASE, version.version_id)
    assert seat is not None and seat.tier < Tier.LOADED
    assert name_of(version) in loaded(engine)
    seat.release()


async def test_an_adapter_the_engine_reloaded_by_itself_counts_as_loaded(cluster: Cluster) -> None:
    engine = cluster.engine()
    version = cluster.version()
    await cluster.serve(version)
    engine.loaded.discard(name_of(version))  # the engine's own LRU dropped it ...
    await cluster.placement.reconcile_all()
    engine.loaded.add(name_of(version))  # ... and re-read it on a request (SGLang)
    await cluster.placement.reconcile_all()
    seat = await cluster.placement.acquire(BASE, version.version_id)
    assert seat is not None and seat.tier >= Tier.LOADED
    seat.release()


async def test_promoting_a_version_prefetches_it_where_the_old_one_is(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=3)
    old, new = cluster.version(), cluster.version()
    await cluster.serve(old)
    await cluster.placement.promote(old.version_id, new.version_id)
    await settle(cluster.placement)
    assert name_of(new) in loaded(engine)


async def test_a_version_that_became_ready_is_loaded_before_its_first_request(
    cluster: Cluster,
) -> None:
    engine = cluster.engine(host_slots=2)
    version = cluster.version()
    await cluster.placement.warm(BASE, version.version_id)
    await settle(cluster.placement)
    assert loaded(engine) == {name_of(version)}
    seat = await cluster.placement.acquire(BASE, version.version_id)
    assert seat is not None and seat.tier >= Tier.LOADED  # its first request waits for no load
    seat.release()


async def test_warming_unloads_nothing_from_a_full_engine(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=2)
    served = [cluster.version() for _ in range(2)]
    for version in served:
        await cluster.serve(version)
    fresh = cluster.version()
    await cluster.placement.warm(BASE, fresh.version_id)
    await settle(cluster.placement)
    assert loaded(engine) == {name_of(v) for v in served}


async def test_a_failed_load_reaches_the_caller(cluster: Cluster) -> None:
    cluster.engine()
    broken = cluster.version()
    cluster.store.delete_prefix(broken.storage_key)
    with pytest.raises(Exception):  # noqa: B017 - whatever the store raises for a missing file
        await cluster.placement.acquire(BASE, broken.version_id)
    await cluster.serve(cluster.version())  # and the engine still serves others


async def test_the_placement_map_shows_tiers_slots_and_heat(cluster: Cluster) -> None:
    engine = cluster.engine(host_slots=2)
    version = cluster.version()
    await cluster.serve(version)
    snapshot = cluster.placement.snapshot()
    [row] = snapshot["engines"]
    assert row["engine_id"] == engine.id and row["host_slots_used"] == 1
    [entry] = snapshot["versions"]
    assert entry["tiers"][engine.id] in {"loaded", "active"} and entry["heat"] > 0


async def test_tiers_of_answers_only_for_the_versions_asked_that_are_placed(
    cluster: Cluster,
) -> None:
    engine = cluster.engine(host_slots=2)
    served, other, never = cluster.version(), cluster.version(), cluster.version()
    await cluster.serve(served)
    await cluster.serve(other)
    placed = cluster.placement.tiers_of([str(served.version_id), str(never.version_id)])
    assert list(placed) == [str(served.version_id)]  # not `other`, not the unplaced one
    assert placed[str(served.version_id)].tiers[engine.id] in {"loaded", "active"}
    assert not placed[str(served.version_id)].pinned


async def test_engines_for_a_base_model_include_those_in_rotation_before_any_request(
    cluster: Cluster,
) -> None:
    first, second = cluster.engine("e1"), cluster.engine("e2")
    assert cluster.placement.engines_for(BASE) == {first.id: "e1", second.id: "e2"}
    assert cluster.placement.engines_for("another-base") == {}


async def test_no_engine_for_the_rank_means_no_seat(cluster: Cluster) -> None:
    cluster.engine()
    assert await cluster.placement.acquire(BASE, cluster.version(rank=128).version_id) is None


async def test_an_sglang_engine_keeps_one_batch_slot_for_base_requests(cluster: Cluster) -> None:
    """SGLang's --max-loras-per-batch counts the base model: 3 slots hold 2 adapters."""
    sglang = cluster.engine("sg", gpu_slots=3, host_slots=4, kind="sglang")
    vllm = cluster.engine("vl", gpu_slots=3, host_slots=4, kind="vllm")
    assert cluster.placement.node_spec(sglang).gpu_slots == 2
    assert cluster.placement.node_spec(vllm).gpu_slots == 3
    single = cluster.engine("one", gpu_slots=1, kind="sglang")
    assert cluster.placement.node_spec(single).gpu_slots == 1  # never zero


async def test_after_a_reported_restart_what_the_engine_held_is_loaded_again_unasked(
    cluster: Cluster,
) -> None:
    engine = cluster.engine(host_slots=4)
    pinned, plain = cluster.version(), cluster.version()
    assert await cluster.placement.pin(pinned.version_id)
    await cluster.serve(pinned)
    await cluster.serve(plain)
    await cluster.placement.reconcile_all()  # the poller's round: remembers what it holds
    engine.driver.restart()  # type: ignore[attr-defined]
    engine.loaded = set()
    await cluster.placement.reconcile_all()  # the empty report arrives before the agent's
    assert loaded(engine) == set()

    await cluster.placement.engine_restarted(engine.id)
    await settle(cluster.placement)

    assert loaded(engine) == {name_of(pinned), name_of(plain)}


async def test_the_core_decides_what_leaves_the_disk_cache(tmp_path: Path) -> None:
    # The core's disk tier holds two 128-byte versions; the cache's own budget is far larger.
    config = LiveConfig(policy=PolicyConfig(eviction="lru"), disk_budget_bytes=256)
    cluster = Cluster(tmp_path, config)
    cluster.engine(host_slots=2)
    a, b, c = (cluster.version() for _ in range(3))
    for version in (a, b, c):
        await cluster.serve(version)
    await cluster.cache.aclose()
    assert [v.version_id in cluster.cache for v in (a, b, c)] == [False, True, True]


async def test_a_disk_cache_the_core_overfills_keeps_to_its_budget(cluster: Cluster) -> None:
    # As when several local engines share the cache: the core budgets 10 GiB of disk for
    # this engine, the cache holds one version. Its hard cap drops the oldest unused copy.
    cluster.cache.budget_bytes = 128
    cluster.engine(host_slots=1)
    a, b = cluster.version(), cluster.version()
    for version in (a, b):
        await cluster.serve(version)
    await cluster.cache.aclose()
    assert (a.version_id in cluster.cache, b.version_id in cluster.cache) == (False, True)


async def test_an_adapter_waiting_for_a_slot_is_copied_onto_the_engine_with_one_free(
    cluster: Cluster,
) -> None:
    """x holds "a" and "b" and runs "a" in its only GPU slot; a request of "b" waits for
    it, and "b" is loaded onto y meanwhile (the copy is carried out on y, not on x)."""
    x = cluster.engine("x", gpu_slots=1, host_slots=2)
    a, b = cluster.version(), cluster.version()
    await cluster.serve(a)
    await cluster.serve(b)
    y = cluster.engine("y", gpu_slots=1, host_slots=2)
    running = await cluster.placement.acquire(BASE, a.version_id)
    assert running is not None and running.engine is x
    waiting = asyncio.create_task(cluster.placement.acquire(BASE, b.version_id))
    await settle(cluster.placement)
    assert name_of(b) in loaded(y) and not waiting.done()
    running.release()
    seat = await waiting
    assert seat is not None and seat.engine is x
    seat.release()
