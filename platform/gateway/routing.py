"""Chooses the engine for a request and makes sure the adapter version is on it.

Order: healthy engines serving the base model whose rank class fits the adapter; among
those, the ones that already hold the adapter, then the least busy. (The full policy —
tiers, eviction, fair dispatch — lives in loraplex.serving.policy; this is its live seam.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from loraplex.gateway import observe
from loraplex.gateway.resolve import Target
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.engines import AdapterNotLoaded
from loraplex.serving.loader import engine_adapter_name, ensure_on_engine
from loraplex.serving.registry import EngineHandle, EngineRegistry

log = logging.getLogger("loraplex.gateway")


@dataclass(frozen=True)
class Prepared:
    """An engine ready to run the request, and how the adapter got there."""

    engine: EngineHandle
    adapter_name: str | None  # engine-side name; None runs the base model
    tier: str = "base"  # where the adapter was found: "loaded", "disk", "cold" or "base"
    load_s: float = 0.0


class EngineRouter:
    """Engine choice plus adapter placement for the live gateway."""

    def __init__(self, registry: EngineRegistry, cache: DiskCache):
        self.registry = registry
        self.cache = cache

    def ordered(self, target: Target, exclude: set[str] = frozenset()) -> list[EngineHandle]:  # type: ignore[assignment]
        """Candidate engines, best first."""
        rank = target.rank or 0
        fits = [
            e
            for e in self.registry.candidates(target.base_model)
            if e.id not in exclude and e.max_lora_rank >= rank
        ]
        name = engine_adapter_name(target.version_id) if target.version_id else None
        return sorted(
            fits,
            key=lambda e: (name is not None and name not in e.loaded, e.max_lora_rank, e.in_flight),
        )

    async def prepare(self, target: Target, exclude: set[str] = frozenset()) -> Prepared | None:  # type: ignore[assignment]
        """The best engine with the adapter loaded on it, or None when no engine can serve."""
        for engine in self.ordered(target, exclude):
            if target.version_id is None:
                return Prepared(engine, None)
            placement = await ensure_on_engine(
                engine, target.version_id, target.storage_key, dict(target.files), self.cache
            )
            observe.adapter_load(placement.tier_label, placement.seconds)
            return Prepared(engine, placement.name, placement.tier_label, placement.seconds)
        return None

    async def report_failure(self, prepared: Prepared, error: Exception) -> None:
        """An engine failed a request: forget what it held and take it out of rotation.

        A lost adapter (the engine restarted, or evicted it behind our back) is not the
        engine's fault: only its name is forgotten, so the next attempt reloads it.
        """
        if prepared.adapter_name:
            prepared.engine.loaded.discard(prepared.adapter_name)
        if not isinstance(error, AdapterNotLoaded):
            await self.registry.mark_unhealthy(prepared.engine.id, str(error))
