"""Workload generators: Zipf popularity over tenants and adapters, rank mix, Poisson arrivals,
popularity shifts and a scanning tenant. Vectorised with numpy so a million requests cost
well under a second to draw."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loraplex.serving.policy import AdapterVersion
from loraplex.serving.simulator.costs import adapter_bytes

SCAN_TENANT = "scanner"
DEFAULT_RANK_MIX: dict[int, float] = {8: 0.5, 16: 0.3, 64: 0.2}


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to generate; one seed fixes everything."""

    requests: int = 50_000
    adapters: int = 1_000
    tenants: int = 20
    alpha: float = 1.0  # Zipf exponent of adapter popularity
    tenant_alpha: float = 0.8  # Zipf exponent of how many adapters each tenant owns
    rate_per_s: float = 40.0
    rank_mix: tuple[tuple[int, float], ...] = tuple(DEFAULT_RANK_MIX.items())
    prompt_tokens: tuple[int, int] = (128, 1024)
    output_tokens: tuple[int, int] = (16, 128)
    scan_adapters: int = 0  # a tenant cycling through this many adapters nobody else uses
    scan_share: float = 0.1  # its share of the request rate
    shift_every_s: float = 0.0  # change the popularity order this often; 0 = stationary
    # At each shift, rotate the order by this many ranks instead of re-drawing it: the hot
    # set moves to adapters that were in the tail and the old hot ones fall into the tail,
    # where they are rarely asked for again (what frequency alone cannot follow).
    shift_rotate: int = 0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Workload:
    """A generated trace: requests sorted by arrival, each naming an adapter by index."""

    adapters: list[AdapterVersion]
    arrival: np.ndarray
    adapter: np.ndarray
    prompt: np.ndarray
    output: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival)

    def without_tenant(self, tenant: str) -> Workload:
        """The same trace with one tenant's requests removed."""
        owners = np.array([a.tenant_id != tenant for a in self.adapters])
        keep = owners[self.adapter]
        return Workload(
            self.adapters,
            self.arrival[keep],
            self.adapter[keep],
            self.prompt[keep],
            self.output[keep],
        )


def _zipf_cdf(n: int, alpha: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** alpha
    cdf: np.ndarray = np.cumsum(weights) / weights.sum()
    return cdf


def make_adapters(spec: WorkloadSpec, rng: np.random.Generator) -> list[AdapterVersion]:
    """Adapters with ranks from the mix; regular tenants own Zipf-sized shares."""
    ranks, probs = zip(*spec.rank_mix, strict=True)
    drawn = rng.choice(np.array(ranks), size=spec.adapters, p=np.array(probs))
    regular = spec.adapters - spec.scan_adapters
    owner_cdf = _zipf_cdf(spec.tenants, spec.tenant_alpha)
    owners = np.searchsorted(owner_cdf, rng.random(regular), side="right")
    tenants = [f"t{int(o)}" for o in owners] + [SCAN_TENANT] * spec.scan_adapters
    return [
        AdapterVersion(f"a{i}", tenants[i], int(rank), adapter_bytes(int(rank)))
        for i, rank in enumerate(drawn)
    ]


def generate(spec: WorkloadSpec) -> Workload:
    """Draw the whole trace; the regular stream does not depend on the scanner's."""
    rng = np.random.default_rng(spec.seed)
    adapters = make_adapters(spec, rng)
    regular = spec.adapters - spec.scan_adapters
    scan_n = round(spec.requests * spec.scan_share) if spec.scan_adapters else 0
    base_n = spec.requests - scan_n
    base_rate = spec.rate_per_s * (1 - spec.scan_share) if scan_n else spec.rate_per_s
    times = np.cumsum(rng.exponential(1.0 / base_rate, base_n))
    popularity = np.searchsorted(_zipf_cdf(regular, spec.alpha), rng.random(base_n), side="right")
    chosen = _apply_shifts(spec, rng, times, popularity, regular)
    if scan_n:
        scan_rng = np.random.default_rng(spec.seed + 1)
        scan_times = np.cumsum(
            scan_rng.exponential(1.0 / (spec.rate_per_s * spec.scan_share), scan_n)
        )
        scan_chosen = regular + np.arange(scan_n) % spec.scan_adapters
        times = np.concatenate([times, scan_times])
        chosen = np.concatenate([chosen, scan_chosen])
    order = np.argsort(times, kind="stable")
    token_rng = np.random.default_rng(spec.seed + 2)
    prompt = token_rng.integers(*spec.prompt_tokens, size=len(times), endpoint=True)
    output = token_rng.integers(*spec.output_tokens, size=len(times), endpoint=True)
    return Workload(adapters, times[order], chosen[order], prompt, output)


def _apply_shifts(
    spec: WorkloadSpec, rng: np.random.Generator, times: np.ndarray, popularity: np.ndarray, n: int
) -> np.ndarray:
    """Map popularity ranks to adapters; a new order every `shift_every_s`.

    The new order is a fresh random one, or with `shift_rotate` the first order rotated by
    that many ranks per shift (so epoch k's rank r is epoch 0's rank r + k x shift_rotate).
    """
    order = rng.permutation(n)
    if spec.shift_every_s <= 0:
        mapped: np.ndarray = order[popularity]
        return mapped
    epoch = (times // spec.shift_every_s).astype(np.int64)
    result = np.empty_like(popularity)
    for k in np.unique(epoch):
        mask = epoch == k
        if spec.shift_rotate:
            result[mask] = order[(popularity[mask] + int(k) * spec.shift_rotate) % n]
        else:
            result[mask] = (order if k == 0 else rng.permutation(n))[popularity[mask]]
    return result
