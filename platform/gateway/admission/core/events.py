"""What the admission core is told (events) and what it answers (decisions).

Every event carries its own time (`at`, seconds on any monotonic clock): the core reads no
clock, so the same events always give the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from loraplex.gateway.admission.core.limits import PlanLimits

Tenant = str


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request asks for a place."""

    request_id: str
    tenant: Tenant
    limits: PlanLimits
    prompt_tokens: int
    at: float


@dataclass(frozen=True, slots=True)
class QuotaRefused:
    """The tenant's own quota (Redis) refused one of its requests: it offers more than its
    plan allows."""

    tenant: Tenant
    at: float


@dataclass(frozen=True, slots=True)
class FirstToken:
    """An admitted request's first token came."""

    request_id: str
    at: float


@dataclass(frozen=True, slots=True)
class Finished:
    """An admitted request ended (done, failed or cut); its place is free."""

    request_id: str
    at: float


@dataclass(frozen=True, slots=True)
class PoolEngine:
    """One engine of a pool and the requests it holds at once. The router sends a request
    to an engine of the lowest `rank` first (its max LoRA rank: the smallest rank class that
    fits), then to the one with the fewest requests."""

    engine: str
    places: int
    rank: int = 0


@dataclass(frozen=True, slots=True)
class EngineReport:
    """What the engines can take now: places (requests in flight at once) and prefill
    places (admitted requests waiting for their first token at once; None: no limit), and
    what the engines themselves say they run and queue. `engines`, when given, names each
    engine of the pool with its own places, in the order the router breaks ties in: the
    core then follows each engine's requests and predicts a TTFT per engine (empty: the
    pool is one engine of `places`)."""

    places: int
    at: float
    prefill_places: int | None = None
    running: int = 0
    waiting: int = 0
    engines: tuple[PoolEngine, ...] = ()


@dataclass(frozen=True, slots=True)
class Routed:
    """An admitted request went to `engine` (the router's choice, which may not be the one
    the core expected): the core moves it there."""

    request_id: str
    engine: str
    at: float


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: waits that ran out are decided."""

    at: float


Event = Arrival | QuotaRefused | FirstToken | Finished | EngineReport | Routed | Tick


@dataclass(frozen=True, slots=True)
class Admit:
    """The request may go to its engine now: `engine`, the one the core expects the router
    to pick ("" in a pool reported as one engine)."""

    request_id: str
    at: float
    engine: str = ""


@dataclass(frozen=True, slots=True)
class Wait:
    """The request waits for a place; it hears again by `until` (a Tick then decides it)."""

    request_id: str
    until: float


@dataclass(frozen=True, slots=True)
class Shed:
    """The request is refused with `retry_after_s`, for `reason`: a 503 for the engines'
    load, the tenant's own 429 when it already runs as many requests as its plan allows."""

    request_id: str
    reason: str  # "engine_busy" | "waited_too_long" | OVER_CONCURRENCY
    retry_after_s: float


# The shed reason of a tenant at its plan's `concurrent_requests` in this process alone.
OVER_CONCURRENCY = "concurrent_requests"


Decision = Admit | Wait | Shed
