"""`bench overload-model`: a `bench overload` run's levels replayed on the engine model."""

from __future__ import annotations

from loraplex.bench.overload_model import compare_run
from loraplex.serving.simulator.engine_profile import BatchShape, EngineProfile, StepCost

# 10 ms a lone step and 1 ms more per sequence: a request alone takes ~0.34 s for 32 tokens.
PROFILE = EngineProfile("sglang", StepCost(base_s=0.01, decode_seq_s=0.001, prefill_token_s=0.0))


def _level(level: str, offered: float, arrived: int) -> dict:
    timeline = [[i / offered, 50.0] for i in range(arrived)]
    return {
        "level": level,
        "admission": "off",
        "offered": offered,
        "slo_ms": 50.0,
        "goodput": offered,
        "p50_ms": 11.0,
        "p99_ms": 20.0,
        "refused": {},
        "failed": 0,
        "requests": timeline,
    }


def test_a_light_level_is_predicted_within_the_slo_and_an_overloaded_one_is_not() -> None:
    lone = PROFILE.step.seconds(BatchShape(decode_seqs=1))
    capacity = 1 / (32 * lone)  # one request at a time, roughly
    rows = [_level("0.5x", 0.2 * capacity, 60), _level("4.0x", 20 * capacity, 300)]
    rows.append({"level": "capacity@3.0/s", "slo_ms": 50.0})  # not a load level: skipped
    light, heavy = compare_run(rows, PROFILE, "core", 24, 32, range(2))
    assert light["predicted"]["p99_ms"] <= 50.0
    assert light["predicted"]["goodput"] > 0.8 * light["offered"]
    assert heavy["predicted"]["p99_ms"] > 50.0
    assert heavy["requests"] == 300
