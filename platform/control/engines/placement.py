"""`/api/v1/placement`: the live placement map, and pins (operators only).

The map is this API replica's view (its policy cores, fed by its health poller). Operator
pins live in the process too: they hold until unpinned or the process restarts. Tenants pin
aliases instead (`PUT .../aliases/{alias}/pin`), stored in the database and followed by every
replica; the map's `pinned` shows both.
"""

from __future__ import annotations

from uuid import UUID

import msgspec
from litestar import Controller, delete, get, put

from loraplex.api.schemas import Output
from loraplex.auth import access
from loraplex.errors import QuotaExceeded, Unavailable
from loraplex.serving.live import LivePlacement

PLACEMENT = "/api/v1/placement"
PIN = PLACEMENT + "/pins/{version_id:uuid}"


class WaitingAdapterOut(Output):
    """An adapter with requests routed to an engine and not yet released to it."""

    version_id: str
    requests: int
    waiting_s: float  # since its oldest such request was routed
    waiting_for: str  # "load" (an engine load, or a host slot for one) | "gpu slot"


class EnginePlacementOut(Output):
    """One engine's slots as placement sees them."""

    engine_id: str
    name: str
    base_model: str
    max_lora_rank: int
    gpu_slots: int
    gpu_slots_used: int
    host_slots: int
    host_slots_used: int
    disk_bytes_used: int
    running: int
    queued: int
    loading: int
    waiting: list[WaitingAdapterOut] = []


class VersionPlacementOut(Output):
    """One adapter version: its tier on each engine that has any copy, and its heat."""

    version_id: str
    tenant_id: str
    rank: int
    size_bytes: int
    heat: float  # requests per half-life, decayed to now
    pinned: bool
    tiers: dict[str, str]  # engine id -> "disk" | "loaded" | "active" | "cold" (arriving)
    best: str


class PlacementOut(Output):
    """The cluster-wide placement map; `live` false where this process places nothing."""

    live: bool
    engines: list[EnginePlacementOut]
    versions: list[VersionPlacementOut]
    loads: int = 0
    unloads: int = 0


class PinOut(Output):
    """A version's pin state."""

    version_id: UUID
    pinned: bool


def _placing(placement: LivePlacement | None) -> LivePlacement:
    if placement is None:
        raise Unavailable("this process does not place adapters")
    return placement


class PlacementController(Controller):
    """Where every adapter version is, per engine; pins that keep versions loaded."""

    tags = ["engines"]

    @get(PLACEMENT, operation_id="GetPlacement", opt=access.OPERATOR)
    async def placement_map(self, placement: LivePlacement | None) -> PlacementOut:
        """Each version's tier per engine, slots used per engine, heat."""
        if placement is None:
            return PlacementOut(live=False, engines=[], versions=[])
        return msgspec.convert({"live": True, **placement.snapshot()}, PlacementOut)

    @put(PIN, operation_id="PinVersion", opt=access.OPERATOR)
    async def pin(self, placement: LivePlacement | None, version_id: UUID) -> PinOut:
        """Keep a version loaded once it is (within the tenant plan's `pinned_adapters`)."""
        if not await _placing(placement).pin(version_id):
            raise QuotaExceeded("the tenant's plan allows no more pinned adapters")
        return PinOut(version_id=version_id, pinned=True)

    @delete(PIN, operation_id="UnpinVersion", opt=access.OPERATOR, status_code=200)
    async def unpin(self, placement: LivePlacement | None, version_id: UUID) -> PinOut:
        """Let a version be evicted again."""
        _placing(placement).unpin(version_id)
        return PinOut(version_id=version_id, pinned=False)
