"""Who gets the places on the engines when tenants want more than there are.

Weighted max-min fairness: each tenant with requests running or waiting gets places in
proportion to its weight, but never more than its plan's concurrency allows; what a bounded
tenant cannot use is split among the others. The weight is what the tenant bought: its plan
priority's weight (`PRIORITY_WEIGHT`) times its requests-per-minute quota in units of
`REFERENCE_RPM`, that factor kept within `QUOTA_FACTOR` (no quota: its top). The default
plans weigh 0.1 (free), 2 (pro) and 40 (enterprise). With equal weights, a tenant that
flooded past a small quota held as many places as one well within a quota ten times larger,
and the larger one was shed at its equal share (measured: `bench overload`'s noisy
neighbour, B refused 1-8 times a run over seven runs).
The admission core (core/) reads the shares: a freed place goes to the waiting tenant
furthest below its share, and no tenant takes a whole place over its share while another is
active. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

PRIORITY_WEIGHT = (1.0, 2.0, 4.0)  # plan priority 0 (free), 1 (pro), 2 (enterprise)
REFERENCE_RPM = 600  # the pro plan's requests per minute: a quota factor of 1
QUOTA_FACTOR = (0.1, 10.0)  # the free plan's 60/min to the enterprise plan's 6000/min


def weight_of(priority: int, requests_per_minute: int | None = None) -> float:
    """A tenant's fair-share weight: its plan priority's (out-of-range priorities clamp)
    times its requests-per-minute quota over `REFERENCE_RPM`, kept within `QUOTA_FACTOR`.

    No quota (None: unlimited) weighs like the largest; a quota of 0 refuses every request
    before it reaches an engine, and weighs like the smallest.
    """
    low, high = QUOTA_FACTOR
    factor = high if requests_per_minute is None else int(requests_per_minute) / REFERENCE_RPM
    return PRIORITY_WEIGHT[min(max(priority, 0), len(PRIORITY_WEIGHT) - 1)] * min(
        max(factor, low), high
    )


@dataclass(frozen=True, slots=True)
class Claim:
    """A tenant's stake in the places: its weight, and the most places its plan allows."""

    weight: float
    bound: float = math.inf


def fair_shares(places: float, claims: Mapping[K, Claim]) -> dict[K, float]:
    """Split `places` by weight, capping each tenant at its bound and sharing the rest.

    >>> fair_shares(10, {"a": Claim(1), "b": Claim(1, bound=2)})
    {'b': 2, 'a': 8.0}
    """
    shares: dict[K, float] = {}
    open_claims = dict(claims)
    left = float(places)
    while open_claims:
        total = sum(c.weight for c in open_claims.values()) or 1.0
        bounded = {k: c for k, c in open_claims.items() if c.bound <= left * c.weight / total}
        if not bounded:
            shares.update({k: left * c.weight / total for k, c in open_claims.items()})
            break
        for key, claim in bounded.items():
            shares[key] = claim.bound
            left -= claim.bound
            del open_claims[key]
    return shares


def neediest(candidates: list[K], running: Mapping[K, int], shares: Mapping[K, float]) -> K:
    """The candidate tenant furthest below its share (the first listed among equals)."""
    return min(candidates, key=lambda k: running.get(k, 0) / max(shares.get(k, 0.0), 1e-9))
