"""Settings of the policy core; plain values so the gateway and the simulator share them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .eviction import DEFAULT_EVICTION
from .model import TenantId


@dataclass(frozen=True, slots=True)
class TenantPlan:
    """What a tenant's plan says about serving."""

    weight: float = 1.0  # fair-share weight in dispatch
    cold_loads_per_minute: float | None = None  # None: unlimited
    max_pins: int = 0


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """How the core decides; `eviction` names a policy in EVICTION_POLICIES."""

    eviction: str = DEFAULT_EVICTION
    rank_aware: bool = True
    max_replicas: int = 2
    # A request whose adapter waits for a GPU slot where it is loaded, while another engine
    # of its class has a slot and a host slot free, loads it there too (a replica, up to
    # `max_replicas`); requests then go to whichever holder starts them now.
    spread_for_slots: bool = True
    max_wait_s: float = 10.0
    # Dispatch in SGLang's own order (DispatchQueue._oldest_fitting) instead of fair share
    # with a bounded wait: the simulator's model of a plain SGLang engine, never the gateway.
    skip_to_fit: bool = False
    # Place as a round-robin balancer does (placement.RoundRobinPlacer): the simulator's
    # plain way, with `skip_to_fit` and LRU; never the gateway.
    round_robin: bool = False
    heat_half_life_s: float = 600.0
    cold_load_burst: int = 20
    contain_over_budget: bool = True  # over-budget tenants' entries are evicted first
    # A request over the cold-load budget waits for its ticket at most this long; later
    # tickets are refused with Retry-After rather than queued, so a tenant asking for more
    # than its plan cannot grow an unbounded backlog of cold loads (shed before queues
    # blow up).
    max_defer_s: float = 30.0
    # Loads ahead of need (core.prefetch, core.warm): a request waiting at admission has its
    # cold adapter loaded while it waits, not once it is admitted; a newly uploaded version
    # is fetched onto a disk of its rank class before its first request.
    load_on_arrival: bool = True
    warm_on_upload: bool = True
    default_plan: TenantPlan = TenantPlan(cold_loads_per_minute=60.0)
    plans: Mapping[TenantId, TenantPlan] = field(default_factory=dict)

    def plan(self, tenant: TenantId) -> TenantPlan:
        """The tenant's plan, or the default."""
        return self.plans.get(tenant, self.default_plan)
