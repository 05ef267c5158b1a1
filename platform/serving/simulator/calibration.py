"""Fit an engine's step time to batch composition from a recorded sweep (numpy only), and
predict a sweep's group with the engine model, to check the fit on loads it was not fitted on.

A sweep is a list of measured requests: groups of `concurrency` requests sent together, each
with its prompt and output length, its time to first token and its total time. Each group
gives two step samples: the first token came after one step that prefilled the whole group
(`concurrency` prompts at once), and every later token after one step that decoded the group.
The fit is least squares on relative error (a 5 ms step counts as much as a 100 ms one),
with every coefficient kept non-negative: a term the data says costs less than nothing is
dropped and the rest refitted, as an engine cannot get faster by holding more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from loraplex.serving.simulator.engine_model import BASE, EngineModel, EngineRequest
from loraplex.serving.simulator.engine_profile import TERMS, BatchShape, EngineProfile, StepCost


@dataclass(frozen=True, slots=True)
class StepSample:
    """One step's composition and how long it took."""

    batch: BatchShape
    seconds: float


@dataclass(frozen=True, slots=True)
class MeasuredRequest:
    """One request of a calibration sweep, sent together with `concurrency - 1` others."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    total_s: float
    adapters: int = 0  # distinct adapters in its group
    rank_sum: int = 0  # their ranks added up


def samples_from_requests(requests: Iterable[MeasuredRequest]) -> list[StepSample]:
    """Each request's prefill step (its TTFT) and its mean decode step as step samples."""
    samples = []
    for r in requests:
        prefill = BatchShape(
            prefill_tokens=r.concurrency * r.prompt_tokens,
            prefill_seqs=r.concurrency,
            adapters=r.adapters,
            rank_sum=r.rank_sum,
        )
        samples.append(StepSample(prefill, r.ttft_s))
        if r.output_tokens > 1 and r.total_s > r.ttft_s:
            decode = BatchShape(decode_seqs=r.concurrency, adapters=r.adapters, rank_sum=r.rank_sum)
            samples.append(StepSample(decode, (r.total_s - r.ttft_s) / (r.output_tokens - 1)))
    return samples


def median_samples(samples: Iterable[StepSample]) -> list[StepSample]:
    """One sample per batch composition: the median time of its samples (prompts within
    ~10 tokens of each other count as one length). On a shared host a sample is the engine's
    speed plus whatever the host did meanwhile: a stall makes one step look slow, and a
    stream whose tokens arrived in one burst makes its decode steps look free. A relative
    fit over single samples leans hard on the fastest of them; the median does not."""
    groups: dict[tuple[int, ...], list[StepSample]] = {}
    for sample in samples:
        b = sample.batch
        per_prompt = round(b.prefill_tokens / b.prefill_seqs / 10) if b.prefill_seqs else 0
        key = (b.decode_seqs, b.prefill_seqs, per_prompt, b.adapters, b.rank_sum)
        groups.setdefault(key, []).append(sample)
    medians = []
    for group in groups.values():
        seconds = float(np.median([s.seconds for s in group]))
        tokens = int(np.median([s.batch.prefill_tokens for s in group]))
        medians.append(StepSample(replace(group[0].batch, prefill_tokens=tokens), seconds))
    return medians


def fit_step_cost(samples: Sequence[StepSample], terms: Sequence[str] = TERMS) -> StepCost:
    """Non-negative least squares (on relative error) of step time over `terms`; the terms
    left out, and any the data cannot tell from zero, cost nothing."""
    if not samples:
        raise ValueError("no samples to fit")
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown step terms: {sorted(unknown)}")
    features = np.array([s.batch.features() for s in samples])
    seconds = np.array([s.seconds for s in samples])
    weights = 1.0 / np.maximum(seconds, 1e-9)
    active = [i for i, name in enumerate(TERMS) if name in terms]
    while True:
        solved, *_ = np.linalg.lstsq(
            features[:, active] * weights[:, None], seconds * weights, rcond=None
        )
        negative = [i for i, c in zip(active, solved, strict=True) if c < 0]
        if not negative:
            break
        active = [i for i in active if i not in negative]
    coefficients = [0.0] * len(TERMS)
    for i, c in zip(active, solved, strict=True):
        coefficients[i] = float(c)
    return StepCost(*coefficients)


def relative_errors(cost: StepCost, samples: Sequence[StepSample]) -> list[float]:
    """Each sample's predicted step time over its measured one, minus one."""
    return [cost.seconds(s.batch) / s.seconds - 1.0 for s in samples]


@dataclass(frozen=True, slots=True)
class GroupPrediction:
    """What the engine model says of `concurrency` requests sent together: the mean TTFT
    and the group's output tokens per second (every token over the last one's end)."""

    ttft_s: float
    tokens_per_s: float


def predict_group(
    profile: EngineProfile, concurrency: int, prompt_tokens: int, output_tokens: int, rank: int = 0
) -> GroupPrediction:
    """Run one group of a sweep through the simulator's engine model (`rank` > 0: every
    request on one adapter of that rank)."""
    engine = EngineModel(profile)
    adapter = "calibrate" if rank else BASE
    for rid in range(concurrency):
        engine.submit(EngineRequest(rid, prompt_tokens, output_tokens, adapter, rank), 0.0)
    firsts, last = [], 0.0
    while engine.busy:
        for event in engine.end_step():
            if event.first:
                firsts.append(event.at)
            if event.finished:
                last = max(last, event.at)
    return GroupPrediction(sum(firsts) / len(firsts), concurrency * output_tokens / last)
