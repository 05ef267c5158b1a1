"""Live placement: the policy core driving real engines, drivers and node disk caches."""

from loraplex.serving.live.errors import ColdLoadLimited, PlacementDeferred
from loraplex.serving.live.facts import DbFacts, FactsSource, VersionFacts, plan_from_limits
from loraplex.serving.live.hints import AliasWatcher, UploadWatcher
from loraplex.serving.live.ops import AgentOps, LocalOps, NodeOps, OpsRouter
from loraplex.serving.live.placement import LiveConfig, LivePlacement, Seat

__all__ = [
    "AgentOps",
    "AliasWatcher",
    "ColdLoadLimited",
    "DbFacts",
    "FactsSource",
    "LiveConfig",
    "LivePlacement",
    "LocalOps",
    "NodeOps",
    "OpsRouter",
    "PlacementDeferred",
    "Seat",
    "UploadWatcher",
    "VersionFacts",
    "plan_from_limits",
]
