"""Pure serving policy: tiers, rank-aware placement, eviction, budgets and dispatch order.

The package imports nothing outside the standard library and itself, and its modules import
each other relatively: `mypy platform/serving/policy` (strict) sees the folder as
`platform.serving.policy`, not `loraplex.serving.policy`, so only relative imports let it
follow the types from one module into the next instead of reading them as Any.
"""

from .actions import (
    Action,
    Deferred,
    Dispatch,
    Evict,
    EvictReason,
    Load,
    Rejected,
    Routed,
)
from .budget import ColdLoadBudget
from .cluster import ClusterState, RankClass
from .config import PolicyConfig, TenantPlan
from .core import PolicyCore
from .dispatch import DispatchQueue
from .eviction import (
    DEFAULT_EVICTION,
    EVICTION_POLICIES,
    BeladyPolicy,
    DecayedLfuPolicy,
    EvictionPolicy,
    GdsfPolicy,
    LruPolicy,
    make_eviction_policy,
)
from .model import (
    TIER_COSTS,
    TO_DISK,
    TO_GPU,
    TO_HOST,
    AdapterVersion,
    LoadCost,
    NodeSpec,
    Request,
    Tier,
    TierCosts,
)
from .slots import EMPTY, GpuSlots

__all__ = [
    "DEFAULT_EVICTION",
    "EMPTY",
    "EVICTION_POLICIES",
    "TIER_COSTS",
    "TO_DISK",
    "TO_GPU",
    "TO_HOST",
    "Action",
    "AdapterVersion",
    "BeladyPolicy",
    "ClusterState",
    "ColdLoadBudget",
    "DecayedLfuPolicy",
    "Deferred",
    "Dispatch",
    "DispatchQueue",
    "Evict",
    "EvictReason",
    "EvictionPolicy",
    "GdsfPolicy",
    "GpuSlots",
    "Load",
    "LoadCost",
    "LruPolicy",
    "NodeSpec",
    "PolicyConfig",
    "PolicyCore",
    "RankClass",
    "Rejected",
    "Request",
    "Routed",
    "TenantPlan",
    "Tier",
    "TierCosts",
    "make_eviction_policy",
]
