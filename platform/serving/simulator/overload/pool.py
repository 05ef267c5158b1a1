"""`loraplex simulate --scenario overload-pool`: admission for a pool of engines of one base
model (prod runs two per rank class), on the overload scenario's loads and targets.

A pool of `POOL_ENGINES` engines of one profile, its requests dispatched as the live router
does (drive.py), its capacity searched on the pool itself (capacity.py). Policies:
- `core, no model`: what the live gate gave a pool before the core predicted per engine:
  one core told the sum of the engines' places and prefill places, without a TTFT model;
- `core per engine`: the core told each engine's places and given the profile's TTFT model,
  which it applies to the engine the router would pick, and told where each request went;
- `lone core, 2x engine`: a reference, the lone-engine core (scenario.py's `core`) on one
  engine with steps twice as fast, on its own yardstick.
"""

from __future__ import annotations

from loraplex.gateway.admission.core import AdmissionCore
from loraplex.serving.simulator.engine_profile import EngineProfile
from loraplex.serving.simulator.overload import drive
from loraplex.serving.simulator.overload.capacity import Yardstick, yardstick
from loraplex.serving.simulator.overload.scenario import (
    LevelResult,
    core_config_for,
    make_policy,
    measure,
    places_told,
    traces_of,
)

POOL_ENGINES = 2
POOL_POLICIES = ("core, no model", "core per engine", "lone core, 2x engine")


def pool_policy(name: str, profile: EngineProfile) -> tuple[AdmissionCore, drive.Places]:
    """A fresh core for a pool of `profile` engines and what the engines report to it; each
    engine's places as the live gate's place book gives them (admission/places.py)."""
    one = yardstick(profile)
    if name == "core, no model":
        config = core_config_for(profile, one, with_model=False)
        places = drive.Places(POOL_ENGINES * one.places, POOL_ENGINES * one.prefill_places)
        return AdmissionCore(config), places
    holds = places_told("core", profile, one).places
    config = core_config_for(profile, one, with_model=True)
    return AdmissionCore(config), drive.Places(POOL_ENGINES * holds, None, holds)


def pool_yardstick(profile: EngineProfile) -> Yardstick:
    """The pool's own yardstick: its capacity and places."""
    return yardstick(profile, POOL_ENGINES)


def run_pool_seed(
    profile: EngineProfile, yard: Yardstick, seed: int, requests_at_1x: int
) -> dict[str, dict[str, LevelResult]]:
    """Every pool policy on every load at one seed: results[policy][load]. `yard` is the
    pool's (`pool_yardstick`)."""
    results: dict[str, dict[str, LevelResult]] = {}
    pool_traces = traces_of(yard, seed, requests_at_1x)
    for name in POOL_POLICIES[:2]:
        results[name] = {}
        for load, trace in pool_traces.items():
            policy, places = pool_policy(name, profile)
            outcome = drive.run(trace, profile, policy, places, POOL_ENGINES)
            results[name][load] = measure(trace, outcome, profile, yard.capacity_per_s)
    fast = profile.faster(POOL_ENGINES)
    fast_yard = yardstick(fast)
    lone: dict[str, LevelResult] = {}
    for load, trace in traces_of(fast_yard, seed, requests_at_1x).items():
        policy_now = make_policy("core", fast, fast_yard, trace)
        outcome = drive.run(trace, fast, policy_now, places_told("core", fast, fast_yard))
        lone[load] = measure(trace, outcome, fast, fast_yard.capacity_per_s)
    results[POOL_POLICIES[2]] = lone
    return results
