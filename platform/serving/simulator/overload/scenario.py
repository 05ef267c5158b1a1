"""`loraplex simulate --scenario overload`: admission policies under overload, per seed.

Loads, as multiples of the profile's capacity (capacity.py), four tenants of equal weight
unless said otherwise:
- `2x`, `4x`: steady Poisson;
- `bursts 2x`: groups of ~4 requests within 2 ms;
- `diurnal 2x`: a rate ramping from 0.5x to 3.5x and back (mean 2x);
- `mixed 2x`: a fifth of the prompts long (600 tokens);
- `noisy`: tenant A floods at 5x its quota (a quota of 5% of capacity), B offers a quarter
  of capacity within its quota; `B alone`: the same B without A. These two run
  `NOISY_LENGTH` times as long as the others, so that B's p99 is not its second-slowest
  request (docs/admission.md, "The noisy neighbour's length").
Policies: none, a fixed cap at the capacity's places, the gate before the core (previous_gate/), the
new core (loraplex.gateway.admission.core) given the profile's step costs as its TTFT model,
the same core without a model (what it does where no calibrated profile is known: places
and prefill places pace it) and the oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from loraplex.gateway.admission.core import AdmissionCore, CoreConfig, PlanLimits
from loraplex.gateway.admission.core.ttft import TtftModel
from loraplex.serving.simulator.engine_profile import EngineProfile
from loraplex.serving.simulator.overload import drive
from loraplex.serving.simulator.overload.baselines import FixedCap, NoAdmission, Oracle
from loraplex.serving.simulator.overload.capacity import (
    SLO_MULTIPLE,
    Yardstick,
    predicted_ttft_s,
    slo_of,
    ttft_over_slo,
)
from loraplex.serving.simulator.overload.previous_gate.gate import TodaysGate
from loraplex.serving.simulator.overload.workload import (
    OUTPUT_TOKENS,
    SHORT_PROMPT_TOKENS,
    TenantLoad,
    Trace,
    generate,
)

POLICIES = ("none", "fixed cap", "today", "core", "core, no model", "oracle")
IN_QUOTA = PlanLimits(priority=1, requests_per_minute=None)
TENANTS = 4
NOISY_QUOTA_SHARE = 0.05  # A's quota, as a share of capacity (as `bench overload`)
B_SHARE = 0.25  # B's offered load, as a share of capacity
# The noisy-neighbour loads run this many times as long as the others: B then offers ~600
# requests at the default length (report.REQUESTS_AT_1X), and its p99 is its 6th slowest.
NOISY_LENGTH = 8
NOISY_LOADS = ("noisy", "B alone")
# The core's wait for a tenant at or over its share, in unloaded TTFTs: 5 ms on the 33 ms
# reference profile, as LORAPLEX_ENGINE_QUEUE_WAIT_S; a light tenant may wait what the SLO
# leaves over an unloaded TTFT.
BUSY_WAIT_OF_UNLOADED = 0.15


def loads(capacity: float) -> dict[str, tuple[TenantLoad, ...]]:
    """Every load of the scenario, by name."""

    def even(
        total: float, pattern: str = "poisson", long_share: float = 0.0
    ) -> tuple[TenantLoad, ...]:
        share = total * capacity / TENANTS
        return tuple(
            TenantLoad(f"t{i}", share, IN_QUOTA, pattern, long_share) for i in range(TENANTS)
        )

    quota_rpm = max(1, round(capacity * 60 * NOISY_QUOTA_SHARE))
    a = TenantLoad(
        "A", 5 * quota_rpm / 60, PlanLimits(1, requests_per_minute=quota_rpm), in_quota=False
    )
    b = TenantLoad("B", B_SHARE * capacity, IN_QUOTA)
    return {
        "2x": even(2.0),
        "4x": even(4.0),
        "bursts 2x": even(2.0, "bursts"),
        "diurnal 2x": even(2.0, "diurnal"),
        "mixed 2x": even(2.0, long_share=0.2),
        "noisy": (a, b),
        "B alone": (b,),
    }


def ttft_model(profile: EngineProfile) -> TtftModel:
    """The core's view of the profile's step costs (what `bench calibrate` fits)."""
    step = profile.step
    return TtftModel(
        step.base_s,
        step.decode_seq_s,
        step.prefill_token_s,
        step.prefill_seq_s,
        profile.prefill_chunk_tokens,
        mixed_steps=profile.kind == "vllm",
    )


def places_told(policy: str, profile: EngineProfile, yard: Yardstick) -> drive.Places:
    """What the engine reports to `policy`: the core with a TTFT model is told what the
    engine can hold (its `max_running`, or the short requests its KV cache holds if fewer)
    and the model paces it; the others the places and prefill places at capacity."""
    if policy == "core":
        in_kv = profile.kv_tokens // (SHORT_PROMPT_TOKENS + OUTPUT_TOKENS)
        return drive.Places(min(profile.max_running, in_kv))
    return drive.Places(yard.places, yard.prefill_places)


def core_config_for(profile: EngineProfile, yard: Yardstick, *, with_model: bool) -> CoreConfig:
    """The core's bounds for an engine of `profile`: here, and in the live gate
    (loraplex.gateway.admission.places) for an engine with a profile."""
    model = ttft_model(profile) if with_model else None
    return CoreConfig(
        max_wait_s=yard.slo_s - yard.unloaded_ttft_s,  # what a wait may add to an idle TTFT
        busy_wait_s=BUSY_WAIT_OF_UNLOADED * yard.unloaded_ttft_s,
        ttft_slo_s=yard.slo_s,
        ttft_model=model,
        ttft_slo_multiple=SLO_MULTIPLE if model else 0.0,
    )


def make_policy(name: str, profile: EngineProfile, yard: Yardstick, trace: Trace) -> drive.Policy:
    """A fresh policy of `name` for one run."""
    if name == "none":
        return NoAdmission()
    if name == "fixed cap":
        return FixedCap(yard.places)
    if name == "today":
        return TodaysGate()
    if name in ("core", "core, no model"):
        return AdmissionCore(core_config_for(profile, yard, with_model=name == "core"))
    slo = {
        int(p): float(s) for p, s in zip(trace.prompt, slo_of(profile, trace.prompt), strict=True)
    }
    return Oracle(
        lambda waiting, running, prompt: predicted_ttft_s(profile, waiting, running, prompt),
        slo.__getitem__,
    )


@dataclass(frozen=True, slots=True)
class LevelResult:
    """One policy on one load."""

    goodput_share: float  # requests within their SLO per second, over capacity
    p99_over_slo: float  # admitted requests' p99 of TTFT / SLO
    per_tenant: dict[str, dict[str, float]]  # goodput/s, p99 over SLO, refused (not quota)


def measure(
    trace: Trace, outcome: drive.Outcome, profile: EngineProfile, capacity: float
) -> LevelResult:
    """Goodput and tails of one run, overall and per tenant."""
    slo = slo_of(profile, trace.prompt)
    ttft = outcome.first_token_at - trace.arrival
    good = ~np.isnan(outcome.finished_at) & (ttft <= slo)
    ratios = ttft_over_slo(trace, outcome, slo)
    per_tenant = {}
    refused = np.array([r not in ("", "quota") for r in outcome.refused])
    for index, tenant in enumerate(trace.tenants):
        mine = trace.tenant == index
        got = mine & ~np.isnan(outcome.first_token_at)
        per_tenant[tenant.name] = {
            "goodput_per_s": float(good[mine].sum() / trace.duration_s),
            "p99_over_slo": float(np.quantile(ttft[got] / slo[got], 0.99)) if got.any() else 0.0,
            "refused": int(refused[mine].sum()),
        }
    return LevelResult(
        float(good.sum() / trace.duration_s / capacity),
        float(np.quantile(ratios, 0.99)) if len(ratios) else 0.0,
        per_tenant,
    )


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one has everything."""
    total = sum(values)
    return total * total / (len(values) * sum(v * v for v in values)) if total > 0 else 1.0


def traces_of(yard: Yardstick, seed: int, requests_at_1x: int) -> dict[str, Trace]:
    """Every load's trace at one seed, by name, at the yardstick's capacity."""
    duration = requests_at_1x / yard.capacity_per_s
    return {
        name: generate(tenants, duration * (NOISY_LENGTH if name in NOISY_LOADS else 1), seed)
        for name, tenants in loads(yard.capacity_per_s).items()
    }


def run_seed(
    profile: EngineProfile, yard: Yardstick, seed: int, requests_at_1x: int
) -> dict[str, dict[str, LevelResult]]:
    """Every policy on every load at one seed: results[policy][load]."""
    traces = traces_of(yard, seed, requests_at_1x)
    results: dict[str, dict[str, LevelResult]] = {}
    for policy in POLICIES:
        results[policy] = {}
        for name, trace in traces.items():
            policy_now = make_policy(policy, profile, yard, trace)
            outcome = drive.run(trace, profile, policy_now, places_told(policy, profile, yard))
            results[policy][name] = measure(trace, outcome, profile, yard.capacity_per_s)
    return results


def summary(results: dict[str, LevelResult]) -> dict[str, Any]:
    """One policy's figures the targets read, at one seed."""
    noisy_b, alone_b = results["noisy"].per_tenant["B"], results["B alone"].per_tenant["B"]
    fair = [t["goodput_per_s"] for t in results["2x"].per_tenant.values()]
    row: dict[str, Any] = {}
    for load in ("2x", "4x", "bursts 2x", "diurnal 2x", "mixed 2x"):
        row[f"{load} goodput"] = results[load].goodput_share
        row[f"{load} p99/SLO"] = results[load].p99_over_slo
    row["B p99 beside A / alone"] = noisy_b["p99_over_slo"] / max(alone_b["p99_over_slo"], 1e-9)
    row["B refused"] = noisy_b["refused"] + alone_b["refused"]
    row["Jain 2x"] = jain(fair)
    return row


TARGETS: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
    ("2x goodput >= 0.95", lambda r: r["2x goodput"] >= 0.95),
    ("2x p99 <= SLO", lambda r: r["2x p99/SLO"] <= 1.0),
    ("4x goodput >= 0.95", lambda r: r["4x goodput"] >= 0.95),
    ("4x p99 <= SLO", lambda r: r["4x p99/SLO"] <= 1.0),
    ("B p99 <= 1.1x alone", lambda r: r["B p99 beside A / alone"] <= 1.1),
    ("B never refused", lambda r: r["B refused"] == 0),
    ("Jain 2x >= 0.95", lambda r: r["Jain 2x"] >= 0.95),
)
