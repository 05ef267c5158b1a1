"""Multi-tenant workloads for the overload scenario: who sends what, when, and their quotas.

Arrival patterns per tenant: `poisson` (steady), `bursts` (groups of requests within a few
milliseconds, the groups Poisson), `diurnal` (a rate that ramps from a quarter of the mean
up to 1.75x and back over the run). Prompts are short, or with `long_share` a mix of short
and long. One seed fixes everything.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from loraplex.gateway.admission.core import PlanLimits

SHORT_PROMPT_TOKENS = 24  # a short chat prompt of the dev model (docs/admission.md's)
LONG_PROMPT_TOKENS = 600
OUTPUT_TOKENS = 32  # `bench overload`'s default max_tokens
BURST_SIZE_MEAN = 4.0  # requests per burst
BURST_SPREAD_S = 0.002  # a burst's requests arrive within this


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """One tenant's offered load and plan."""

    name: str
    rate_per_s: float
    limits: PlanLimits = field(default_factory=PlanLimits)
    pattern: str = "poisson"  # "poisson" | "bursts" | "diurnal"
    long_share: float = 0.0  # share of its prompts that are long
    in_quota: bool = True  # offers no more than its quota (counted in the fairness target)


@dataclass(frozen=True, slots=True)
class Trace:
    """Every request of a run, sorted by arrival."""

    arrival: np.ndarray
    tenant: np.ndarray  # index into `tenants`
    prompt: np.ndarray
    output: np.ndarray
    tenants: tuple[TenantLoad, ...]
    duration_s: float

    def __len__(self) -> int:
        return len(self.arrival)


def _poisson(rng: np.random.Generator, rate: float, duration_s: float) -> np.ndarray:
    count = rng.poisson(rate * duration_s)
    return np.sort(rng.uniform(0.0, duration_s, count))


def _bursts(rng: np.random.Generator, rate: float, duration_s: float) -> np.ndarray:
    starts = _poisson(rng, rate / BURST_SIZE_MEAN, duration_s)
    sizes = rng.geometric(1.0 / BURST_SIZE_MEAN, len(starts))
    times = np.repeat(starts, sizes) + rng.uniform(0.0, BURST_SPREAD_S, int(sizes.sum()))
    return np.sort(times[times < duration_s])


def _diurnal(rng: np.random.Generator, rate: float, duration_s: float) -> np.ndarray:
    """A rate of rate x (0.25 + 1.5 sin^2(pi t / duration)): mean `rate`, peak 1.75x."""
    peak = 1.75 * rate
    times = _poisson(rng, peak, duration_s)
    keep = rng.uniform(0.0, peak, len(times)) < rate * (
        0.25 + 1.5 * np.sin(np.pi * times / duration_s) ** 2
    )
    return times[keep]


PATTERNS = {"poisson": _poisson, "bursts": _bursts, "diurnal": _diurnal}


def generate(tenants: tuple[TenantLoad, ...], duration_s: float, seed: int) -> Trace:
    """Draw every tenant's requests; a tenant's draw depends on its name and the seed only."""
    arrivals, owners, prompts = [], [], []
    for index, load in enumerate(tenants):
        # Seeded by the tenant's name, not its place in the list: B draws the same requests
        # beside A as alone, so the noisy neighbour's ratio compares like with like.
        rng = np.random.default_rng([seed, zlib.crc32(load.name.encode())])
        times = PATTERNS[load.pattern](rng, load.rate_per_s, duration_s)
        long = rng.uniform(0.0, 1.0, len(times)) < load.long_share
        arrivals.append(times)
        owners.append(np.full(len(times), index))
        prompts.append(np.where(long, LONG_PROMPT_TOKENS, SHORT_PROMPT_TOKENS))
    arrival = np.concatenate(arrivals)
    order = np.argsort(arrival, kind="stable")
    return Trace(
        arrival=arrival[order],
        tenant=np.concatenate(owners)[order],
        prompt=np.concatenate(prompts)[order],
        output=np.full(len(arrival), OUTPUT_TOKENS),
        tenants=tenants,
        duration_s=duration_s,
    )


class QuotaBuckets:
    """Each tenant's requests-per-minute quota as a token bucket holding `burst_s` of it
    (the live quota is Redis's; the simulator keeps a small bucket so a short run sees a
    flood refused, where a minute's bucket would pass its first minute)."""

    def __init__(self, tenants: tuple[TenantLoad, ...], burst_s: float = 2.0) -> None:
        self._rate = [
            None if t.limits.requests_per_minute is None else t.limits.requests_per_minute / 60
            for t in tenants
        ]
        self._size = [None if r is None else max(1.0, r * burst_s) for r in self._rate]
        self._level = [s or 0.0 for s in self._size]
        self._at = [0.0] * len(tenants)

    def take(self, tenant: int, now: float) -> bool:
        """Whether the tenant's quota lets one more request in now (and charge it)."""
        rate, size = self._rate[tenant], self._size[tenant]
        if rate is None or size is None:
            return True
        level = min(size, self._level[tenant] + (now - self._at[tenant]) * rate)
        self._at[tenant] = now
        if level < 1.0:
            self._level[tenant] = level
            return False
        self._level[tenant] = level - 1.0
        return True
