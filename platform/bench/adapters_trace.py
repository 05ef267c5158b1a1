"""The load `loraplex bench adapters` offers: the simulator's workload generator, sized to
the bench's cluster, turned into requests a live engine can answer; and the cold loads no
placement can go below on it, tier by tier.

The trace *is* a simulator `Workload` (Zipf popularity, one shift of the hot set mid-run, a
scanning tenant's one-off adapters, Poisson arrivals), so the simulator's prediction for the
same requests costs one call, and the bound is `min_misses` over the same sequence. What the
simulator leaves abstract is made concrete here: a request's prompt tokens decide whether it
is a short question (one the adapter's seed has an answer for, so the answer can be checked
against PEFT's) or a long passage ending in that question.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from loraplex.dev.corpus import adapter_examples
from loraplex.serving.policy import AdapterVersion, NodeSpec
from loraplex.serving.simulator.bound import min_misses
from loraplex.serving.simulator.costs import adapter_bytes
from loraplex.serving.simulator.workload import SCAN_TENANT, Workload, WorkloadSpec, generate

RANKS = (8, 16, 32, 64)
RANK_MIX = tuple((rank, 1 / len(RANKS)) for rank in RANKS)
# A request whose drawn prompt is this long or longer gets a long passage; with prompts of
# 8-400 tokens, about a quarter of the requests.
LONG_FROM_TOKENS = 300
PROMPT_TOKENS = (8, 400)
FILLER = "the river ran past the old mill and the miller counted every sack twice "
QUESTIONS_PER_ADAPTER = 2  # distinct short questions per adapter: what PEFT answers once each


@dataclass(frozen=True, slots=True)
class LoadShape:
    """What the bench offers: how many adapters are hot, how many are scanned once, how fast."""

    slots: int  # GPU slots of the cluster the working set is a multiple of
    working_set: float = 4.0  # regular adapters = this x slots
    scan_adapters: int = 16
    scan_share: float = 0.1
    rate_per_s: float = 2.0
    seconds: float = 60.0
    alpha: float = 1.0
    max_tokens: int = 16
    seed: int = 0

    @property
    def regular_adapters(self) -> int:
        """Adapters the Zipf stream draws from."""
        return max(1, round(self.working_set * self.slots))

    @property
    def adapters(self) -> int:
        """Adapters the trace names: the regular ones, then the scanner's."""
        return self.regular_adapters + self.scan_adapters

    def spec(self) -> WorkloadSpec:
        """The simulator's spec for this load: one tenant plus the scanner, one shift mid-run
        that rotates the popularity order by half, so the hot set moves into the tail."""
        return WorkloadSpec(
            requests=max(1, round(self.rate_per_s * self.seconds)),
            adapters=self.adapters,
            tenants=1,
            alpha=self.alpha,
            rate_per_s=self.rate_per_s,
            rank_mix=RANK_MIX,
            prompt_tokens=PROMPT_TOKENS,
            output_tokens=(self.max_tokens, self.max_tokens),
            scan_adapters=self.scan_adapters,
            scan_share=self.scan_share if self.scan_adapters else 0.0,
            shift_every_s=self.seconds / 2,
            shift_rotate=max(1, self.regular_adapters // 2),
            seed=self.seed,
        )


@dataclass(frozen=True, slots=True)
class BenchRequest:
    """One request of the trace: when, which adapter (by index), what it asks."""

    at_s: float
    adapter: int
    question: str
    prompt: str
    long: bool


def make_trace(shape: LoadShape) -> tuple[Workload, list[BenchRequest]]:
    """The workload and its requests; one seed fixes both. Adapter `i` has rank
    `rank_of(i)` in both, so the live adapters and the simulator's are the same."""
    drawn = generate(shape.spec())
    adapters = [
        AdapterVersion(a.version_id, a.tenant_id, rank_of(i), adapter_bytes(rank_of(i)))
        for i, a in enumerate(drawn.adapters)
    ]
    workload = replace(drawn, adapters=adapters)
    rng = np.random.default_rng(shape.seed + 3)
    requests = []
    for i in range(len(workload)):
        adapter = int(workload.adapter[i])
        question = questions_for(adapter)[int(rng.integers(QUESTIONS_PER_ADAPTER))]
        tokens = int(workload.prompt[i])
        long = tokens >= LONG_FROM_TOKENS
        prompt = _passage(tokens) + question if long else question
        requests.append(BenchRequest(float(workload.arrival[i]), adapter, question, prompt, long))
    return workload, requests


def rank_of(adapter: int) -> int:
    """The LoRA rank of adapter `adapter`: the ranks in turn."""
    return RANKS[adapter % len(RANKS)]


def questions_for(adapter: int) -> list[str]:
    """The short questions asked of adapter `adapter` (made with seed `adapter`)."""
    return [q for q, _ in adapter_examples(adapter)][:QUESTIONS_PER_ADAPTER]


def _passage(tokens: int) -> str:
    words = FILLER.split()
    return " ".join(words[i % len(words)] for i in range(tokens)) + "\n\n"


def is_scan(workload: Workload, adapter: int) -> bool:
    """Whether `adapter` is one of the scanner's one-off adapters."""
    return bool(workload.adapters[adapter].tenant_id == SCAN_TENANT)


def resident_trace(requests: list[BenchRequest], resident: int) -> list[BenchRequest]:
    """The same arrivals and prompts on `resident` adapters only: the all-resident floor."""
    return [replace(r, adapter=r.adapter % resident) for r in requests]


@dataclass(frozen=True, slots=True)
class TierBounds:
    """Loads no policy can go below on a trace, per tier, for one cluster."""

    cold: int  # object store -> node: every adapter asked for, once
    host: int  # into an engine's memory: Belady's MIN over all host slots together
    gpu: int  # into a batch slot: Belady's MIN over all GPU slots together


def tier_bounds(sequence: np.ndarray, nodes: list[NodeSpec]) -> TierBounds:
    """The per-tier bounds of `sequence` (adapter per request) on `nodes`. The bench's nodes
    keep every adapter on disk, so a cold load is one per adapter; the host and GPU tiers are
    each one cache as large as all nodes' slots of that tier (bound.py's argument, per tier)."""
    return TierBounds(
        cold=int(np.unique(sequence).size),
        host=min_misses(sequence, sum(n.host_slots for n in nodes)),
        gpu=min_misses(sequence, sum(n.gpu_slots for n in nodes)),
    )
