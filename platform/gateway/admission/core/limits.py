"""A tenant's plan, as admission reads it: typed, not a dict of strings to ints."""

from __future__ import annotations

import math
from dataclasses import dataclass

from loraplex.gateway.admission.fair_share import Claim, weight_of

# Lower priority classes see less of the engine: a request of priority 0 is admitted while
# fewer than this share of the places are taken (the default plans' free tier).
PRIORITY_PLACES_SHARE = (0.8, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class PlanLimits:
    """What a tenant's plan says about its share of the engines."""

    priority: int = 1  # 0 free, 1 pro, 2 enterprise
    requests_per_minute: int | None = None  # None: no quota
    concurrent_requests: int | None = None  # None: no bound on its places

    @property
    def weight(self) -> float:
        """Its fair-share weight: what it bought (fair_share.weight_of)."""
        return float(weight_of(self.priority, self.requests_per_minute))

    def claim(self) -> Claim:
        """Its stake in the places: its weight, bounded by its concurrency."""
        bound = float(self.concurrent_requests) if self.concurrent_requests else math.inf
        return Claim(self.weight, bound)

    def places_share(self) -> float:
        """The share of the places a request of this plan's priority may fill."""
        index = min(max(self.priority, 0), len(PRIORITY_PLACES_SHARE) - 1)
        return PRIORITY_PLACES_SHARE[index]
