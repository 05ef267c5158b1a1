"""The yardsticks of the overload scenario, defined once (docs/admission.md, "Overload in
the simulator"):

- **unloaded TTFT**: a request's TTFT alone on an idle engine of the profile, for its own
  prompt length;
- **SLO**: `SLO_MULTIPLE` x the unloaded TTFT of the request's prompt (twice, as `bench
  overload`'s SLO is twice the unloaded p99);
- **capacity**: the highest steady Poisson rate whose p99 of TTFT / SLO stays within 1 with
  admission off, found by doubling and then bisection on one fixed trace seed, so the same
  profile always gives the same capacity;
- **places**: the requests in flight at capacity (Little's law on that run), rounded up,
  which the fixed cap and the core without a TTFT model are given; **prefill places**: the
  most short prompts one step may prefill beside a decoding batch of that size within the
  SLO. The core with a model is told the engine's own `max_running` instead.

A pool of several engines of one profile (`engines`) has its own capacity, searched the same
way with the requests dispatched as the live router does (drive.py); its SLO is its
engines'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loraplex.gateway.admission.core import PlanLimits
from loraplex.serving.simulator.engine_profile import BatchShape, EngineProfile
from loraplex.serving.simulator.overload import drive
from loraplex.serving.simulator.overload.baselines import NoAdmission
from loraplex.serving.simulator.overload.workload import (
    SHORT_PROMPT_TOKENS,
    TenantLoad,
    Trace,
    generate,
)

SLO_MULTIPLE = 3.0
SEARCH_SEED = 1_000_003  # the capacity search's one trace seed (not one of the runs' seeds)
SEARCH_REQUESTS = 1_500  # requests per rate tried
BISECTIONS = 12


@dataclass(frozen=True, slots=True)
class Yardstick:
    """A profile's unloaded TTFT, SLO, capacity and places."""

    unloaded_ttft_s: float  # for a short prompt
    slo_s: float  # for a short prompt
    capacity_per_s: float
    places: int
    prefill_places: int


def unloaded_ttft_s(profile: EngineProfile, prompt_tokens: int) -> float:
    """A request's TTFT alone on an idle engine: one step prefilling its prompt (in chunks)."""
    chunk = profile.prefill_chunk_tokens
    steps = math.ceil(prompt_tokens / chunk)
    full = BatchShape(prefill_tokens=chunk, prefill_seqs=1)
    last = BatchShape(prefill_tokens=prompt_tokens - chunk * (steps - 1), prefill_seqs=1)
    return (steps - 1) * profile.step.seconds(full) + profile.step.seconds(last)


def slo_of(profile: EngineProfile, prompts: np.ndarray) -> np.ndarray:
    """Each request's TTFT SLO, for its prompt length."""
    lengths = {int(p): SLO_MULTIPLE * unloaded_ttft_s(profile, int(p)) for p in np.unique(prompts)}
    return np.array([lengths[int(p)] for p in prompts])


def ttft_over_slo(trace: Trace, outcome: drive.Outcome, slo: np.ndarray) -> np.ndarray:
    """TTFT / SLO of every admitted request that got a first token."""
    got = ~np.isnan(outcome.first_token_at)
    return (outcome.first_token_at[got] - trace.arrival[got]) / slo[got]


def steady(rate: float, requests: int, seed: int) -> Trace:
    """One tenant without a quota offering `rate` of short prompts, Poisson."""
    tenant = TenantLoad("steady", rate, PlanLimits())
    return generate((tenant,), requests / rate, seed)


def _holds(profile: EngineProfile, rate: float, engines: int) -> tuple[bool, drive.Outcome, Trace]:
    trace = steady(rate, SEARCH_REQUESTS, SEARCH_SEED)
    outcome = drive.run(trace, profile, NoAdmission(), None, engines)
    ratios = ttft_over_slo(trace, outcome, slo_of(profile, trace.prompt))
    return bool(np.quantile(ratios, 0.99) <= 1.0), outcome, trace


_SEARCHED: dict[tuple[str, int], Yardstick] = {}


def yardstick(profile: EngineProfile, engines: int = 1) -> Yardstick:
    """The yardstick of a pool of `engines` engines of the profile, searched once per
    profile and pool size in a process."""
    key = (profile.to_json(), engines)
    if key not in _SEARCHED:
        _SEARCHED[key] = search_yardstick(profile, engines)
    return _SEARCHED[key]


def search_yardstick(profile: EngineProfile, engines: int = 1) -> Yardstick:
    """Search the capacity (deterministic) of a pool of `engines` engines of the profile
    and derive its places."""
    unloaded = unloaded_ttft_s(profile, SHORT_PROMPT_TOKENS)
    low, high = 0.0, 0.25 / unloaded
    while _holds(profile, high, engines)[0]:
        low, high = high, high * 2
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if _holds(profile, middle, engines)[0] else (low, middle)
    _, outcome, trace = _holds(profile, low, engines)
    in_flight = low * float(np.nanmean(outcome.finished_at - trace.arrival))
    places = max(1, math.ceil(in_flight))
    return Yardstick(
        unloaded, SLO_MULTIPLE * unloaded, low, places, _prefill_places(profile, places)
    )


def _prefill_places(profile: EngineProfile, places: int) -> int:
    """The most short prompts one step may prefill, after a decode step of `places`, within
    the SLO (at least one)."""
    slo = SLO_MULTIPLE * unloaded_ttft_s(profile, SHORT_PROMPT_TOKENS)
    decode = profile.step.seconds(BatchShape(decode_seqs=places))
    k = 1
    while True:
        batch = BatchShape(prefill_tokens=(k + 1) * SHORT_PROMPT_TOKENS, prefill_seqs=k + 1)
        if decode + profile.step.seconds(batch) > slo:
            return k
        k += 1


def predicted_ttft_s(
    profile: EngineProfile, prefilling: list[int], running: int, prompt_tokens: int
) -> float:
    """The oracle's knowledge: the TTFT a request gets joining `running` decoding
    requests and `prefilling` prompts, from the profile (one decode step to wait, then one
    prefill step of every waiting prompt and its own)."""
    wait = profile.step.seconds(BatchShape(decode_seqs=running)) if running else 0.0
    tokens = sum(prefilling) + prompt_tokens
    chunk = profile.prefill_chunk_tokens
    steps = max(1, math.ceil(tokens / chunk))
    batch = BatchShape(prefill_tokens=min(tokens, chunk), prefill_seqs=len(prefilling) + 1)
    return wait + steps * profile.step.seconds(batch)
