"""The core's view at one moment, for the engines page: places, who holds them, who waits."""

from __future__ import annotations

from dataclasses import dataclass

from loraplex.gateway.admission.core.events import Tenant


@dataclass(frozen=True, slots=True)
class TenantView:
    """One active tenant: its fair share of the places, what it runs and what waits."""

    tenant: Tenant
    share: float
    running: int
    waiting: int


@dataclass(frozen=True, slots=True)
class CoreSnapshot:
    """The pool as the core sees it, as of its last event (`at`)."""

    at: float
    places: int
    prefill_places: int | None  # None: no bound on prompts waiting for a first token
    in_flight: int
    prefilling: int  # admitted, no first token yet
    waiting: int
    tenants: tuple[TenantView, ...]  # by tenant name
