"""A LivePlacement over FakeDriver engines, a local object store and a disk cache."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from loraplex.adapters.store import LocalStore
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.live import LiveConfig, LivePlacement, LocalOps, OpsRouter, VersionFacts
from loraplex.serving.loader import engine_adapter_name
from loraplex.serving.policy import TenantPlan
from loraplex.serving.registry import EngineHandle, EngineRegistry
from tests.support.fake_driver import FakeDriver

BASE = "tiny"


@dataclass
class FakeFacts:
    """Version facts, tenant plans and the versions pinned aliases point at, in memory."""

    versions: dict[uuid.UUID, VersionFacts] = field(default_factory=dict)
    plans: dict[uuid.UUID, TenantPlan] = field(default_factory=dict)
    pinned: set[uuid.UUID] = field(default_factory=set)

    async def version(self, version_id: uuid.UUID) -> VersionFacts | None:
        """The version, if added."""
        return self.versions.get(version_id)

    async def plan(self, tenant_id: uuid.UUID) -> TenantPlan:
        """The tenant's plan, or an unlimited one."""
        return self.plans.get(tenant_id, TenantPlan(cold_loads_per_minute=None, max_pins=4))

    async def pinned_versions(self) -> frozenset[uuid.UUID]:
        """What the test pinned through "aliases"."""
        return frozenset(self.pinned)


class Cluster:
    """Engines, versions and the placement under test."""

    def __init__(self, root: Path, config: LiveConfig | None = None) -> None:
        self.store = LocalStore(root / "store")
        self.cache = DiskCache(root / "cache", 10**9, self.store)
        self.registry = EngineRegistry()
        self.facts = FakeFacts()
        self.root = root
        self.placement = LivePlacement(
            self.registry, OpsRouter(LocalOps(self.cache)), self.facts, config or LiveConfig()
        )

    def engine(
        self, name: str = "e1", gpu_slots: int = 1, host_slots: int = 2, kind: str = "vllm"
    ) -> EngineHandle:
        """Add a healthy engine with a FakeDriver (of `kind`'s slot accounting)."""
        driver = FakeDriver(kind=kind, url=f"http://{name}")
        handle = EngineHandle(
            name, name, driver.url, kind, BASE, 64, gpu_slots, host_slots, driver, healthy=True
        )
        self.registry.add(handle)
        return handle

    def version(self, tenant: uuid.UUID | None = None, rank: int = 8) -> VersionFacts:
        """A version stored in the object store and known to the facts source."""
        version_id = uuid.uuid4()
        prefix = f"adapters/{version_id}/"
        source = self.root / f"{version_id}.safetensors"
        source.write_bytes(version_id.bytes * 8)
        sha = self.store.put_file(prefix + "adapter_model.safetensors", source).sha256
        facts = VersionFacts(
            version_id, tenant or uuid.uuid4(), rank, 128, prefix,
            {"adapter_model.safetensors": sha},
        )  # fmt: skip
        self.facts.versions[version_id] = facts
        return facts

    async def serve(self, facts: VersionFacts) -> str:
        """Acquire a seat for the version, check the engine has it, release; the engine id."""
        seat = await self.placement.acquire(BASE, facts.version_id)
        assert seat is not None
        assert seat.adapter_name in seat.engine.driver.adapters  # type: ignore[attr-defined]
        seat.release()
        await settle(self.placement)
        return seat.engine.id


def loaded(handle: EngineHandle) -> set[str]:
    """What the fake engine holds."""
    driver: FakeDriver = handle.driver  # type: ignore[assignment]
    return set(driver.adapters)


def name_of(facts: VersionFacts) -> str:
    """The engine-side name of a version."""
    return engine_adapter_name(facts.version_id)


async def settle(placement: LivePlacement) -> None:
    """Let every spawned load and unload finish."""
    for _ in range(3):
        await asyncio.sleep(0)
    await placement.runner.drain()
