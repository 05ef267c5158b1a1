"""Decisions the policy returns; the gateway or the simulator carries them out."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .model import NodeId, Request, Tier, VersionId


class EvictReason(enum.StrEnum):
    """Why an entry left a tier; a metrics label."""

    CAPACITY = "capacity"  # room for a load
    RECONCILE = "reconcile"  # the engine no longer has it


@dataclass(frozen=True, slots=True)
class Load:
    """Bring `version_id` up to `tier` on `node_id` (from the tier below it)."""

    node_id: NodeId
    version_id: VersionId
    tier: Tier
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Evict:
    """Drop `version_id` from `tier` on `node_id`."""

    node_id: NodeId
    version_id: VersionId
    tier: Tier
    reason: EvictReason


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Release `request` to the engine on `node_id`, in GPU slot `slot`."""

    node_id: NodeId
    request: Request
    slot: int
    swapped_in: bool  # the engine must copy the adapter host -> GPU first
    displaced: VersionId | None  # the idle adapter whose slot it takes


@dataclass(frozen=True, slots=True)
class Routed:
    """The request joined `node_id`'s queue; `found` is the tier it found there."""

    node_id: NodeId
    found: Tier
    actions: tuple[Load | Evict, ...]


@dataclass(frozen=True, slots=True)
class Deferred:
    """The tenant is over its cold-load budget: retry the request at `until`."""

    until: float


@dataclass(frozen=True, slots=True)
class Rejected:
    """Over budget by more than the deferral bound: refuse now (HTTP 429 with Retry-After)."""

    retry_after_s: float


Action = Load | Evict
