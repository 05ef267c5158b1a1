"""Pure serving policy: tiers, rank-aware placement, eviction, budgets and dispatch order."""

from loraplex.serving.policy.actions import (
    Action,
    Deferred,
    Dispatch,
    Evict,
    EvictReason,
    Load,
    Rejected,
    Routed,
)
from loraplex.serving.policy.budget import ColdLoadBudget
from loraplex.serving.policy.cluster import ClusterState, RankClass
from loraplex.serving.policy.config import PolicyConfig, TenantPlan
from loraplex.serving.policy.core import PolicyCore
from loraplex.serving.policy.dispatch import DispatchQueue
from loraplex.serving.policy.eviction import (
    DEFAULT_EVICTION,
    EVICTION_POLICIES,
    BeladyPolicy,
    DecayedLfuPolicy,
    EvictionPolicy,
    GdsfPolicy,
    LruPolicy,
    make_eviction_policy,
)
from loraplex.serving.policy.model import (
    AdapterVersion,
    Clock,
    LoadCost,
    ManualClock,
    NodeSpec,
    Request,
    Tier,
    TierCosts,
)
from loraplex.serving.policy.slots import EMPTY, GpuSlots

__all__ = [
    "DEFAULT_EVICTION",
    "EMPTY",
    "EVICTION_POLICIES",
    "Action",
    "AdapterVersion",
    "BeladyPolicy",
    "Clock",
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
    "ManualClock",
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
