"""Chooses the engine for a request and makes sure the adapter version is on it.

Adapter requests go through live placement (loraplex.serving.live): the policy core picks
the engine (rank class, tiers, load), loads and evicts by policy, and releases the request
to the engine in its dispatch order; the seat is given back when the pump closes the engine
stream. Base-model requests (and a router built without placement, as in unit tests) take
the healthy engine with the fewest requests in flight; without placement an adapter is
loaded on demand and never unloaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from loraplex.gateway import observe
from loraplex.gateway.resolve import Target
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.engines import AdapterNotLoaded
from loraplex.serving.live import LivePlacement
from loraplex.serving.loader import (
    engine_adapter_name,
    ensure_on_engine,
    version_id_from_engine_name,
)
from loraplex.serving.policy import Tier
from loraplex.serving.registry import EngineHandle, EngineRegistry

log = logging.getLogger("loraplex.gateway")
NO_EXCLUSIONS: frozenset[str] = frozenset()


def _nothing() -> None:
    """A seat with nothing to give back (base model, or no placement)."""


@dataclass(frozen=True)
class ReadyEngine:
    """An engine ready to run the request, and how the adapter got there."""

    engine: EngineHandle
    adapter_name: str | None  # engine-side name; None runs the base model
    tier: str = "base"  # where the adapter was found: "loaded", "disk", "cold" or "base"
    load_s: float = 0.0
    # Called once when the engine request has ended (the pump does): frees the seat.
    release: Callable[[], None] = field(default=_nothing, compare=False)


def tier_label(tier: Tier) -> str:
    """A tier as the adapter-load metric labels it."""
    return "loaded" if tier >= Tier.LOADED else tier.name.lower()


class EngineRouter:
    """Engine choice plus adapter placement for the live gateway."""

    def __init__(
        self,
        registry: EngineRegistry,
        cache: DiskCache,
        placement: LivePlacement | None = None,
    ):
        self.registry = registry
        self.cache = cache
        self.placement = placement

    def ordered(
        self, target: Target, exclude: frozenset[str] = NO_EXCLUSIONS
    ) -> list[EngineHandle]:
        """Candidate engines, best first (the path without placement)."""
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

    async def prepare(
        self, target: Target, exclude: set[str] | frozenset[str] = NO_EXCLUSIONS
    ) -> ReadyEngine | None:
        """An engine with the adapter loaded and room for the request; None when none can serve.

        Raises the placement's refusals (429 over the cold-load budget, 503 deferred past the
        queue timeout) and a failed load's error.
        """
        if target.version_id is not None and self.placement is not None:
            return await self._placed(target, frozenset(exclude))
        for engine in self.ordered(target, frozenset(exclude)):
            if target.version_id is None:
                return ReadyEngine(engine, None)
            placement = await ensure_on_engine(
                engine, target.version_id, target.storage_key, dict(target.files), self.cache
            )
            observe.adapter_found(placement.tier_label)
            if placement.made_load:
                observe.adapter_loaded(
                    placement.tier_label, engine.max_lora_rank, placement.seconds
                )
            return ReadyEngine(engine, placement.name, placement.tier_label, placement.seconds)
        return None

    async def _placed(self, target: Target, exclude: frozenset[str]) -> ReadyEngine | None:
        assert self.placement is not None and target.version_id is not None
        seat = await self.placement.acquire(target.base_model, target.version_id)
        if seat is None:
            return None
        if seat.engine.id in exclude:  # failed this request before; rotation drops it soon
            seat.release()
            return None
        label = tier_label(seat.tier)
        observe.adapter_found(label)
        return ReadyEngine(seat.engine, seat.adapter_name, label, seat.waited_s, seat.release)

    def first_token(self, target: Target, ttft_s: float) -> None:
        """A request for `target` got its first token: its adapter's figures (placement's)."""
        if self.placement is not None and target.version_id is not None:
            self.placement.first_token(target.version_id, ttft_s)

    async def report_failure(self, ready: ReadyEngine, error: Exception) -> None:
        """An engine failed a request: forget what it held and take it out of rotation.

        A lost adapter (the engine restarted, or evicted it behind our back) is not the
        engine's fault: only its name is forgotten, so the next attempt reloads it.
        """
        if ready.adapter_name:
            ready.engine.loaded.discard(ready.adapter_name)
            version_id = version_id_from_engine_name(ready.adapter_name)
            if self.placement is not None and version_id is not None:
                self.placement.forget(ready.engine.id, version_id)
        if not isinstance(error, AdapterNotLoaded):
            await self.registry.mark_unhealthy(ready.engine.id, str(error))
