"""The simulator's engine model, its profiles and the calibration fit."""

from __future__ import annotations

import json

import pytest

from loraplex.serving.simulator.calibration import (
    MeasuredRequest,
    fit_step_cost,
    samples_from_requests,
)
from loraplex.serving.simulator.engine_model import EngineModel, EngineRequest
from loraplex.serving.simulator.engine_profile import (
    BatchShape,
    EngineProfile,
    StepCost,
    load_profile,
)

COST = StepCost(base_s=0.01, decode_seq_s=0.002, prefill_token_s=0.001)


def _run(engine: EngineModel) -> dict[int, list[float]]:
    """Every request's (first token, finished) times once the engine drains."""
    times: dict[int, list[float]] = {}
    while engine.busy:
        for event in engine.end_step():
            if event.first:
                times.setdefault(event.rid, [event.at, event.at])
            if event.finished:
                times.setdefault(event.rid, [event.at, event.at])[1] = event.at
    return times


def test_a_lone_request_takes_one_prefill_step_then_a_decode_step_per_token() -> None:
    engine = EngineModel(EngineProfile("sglang", COST))
    engine.submit(EngineRequest(0, prompt_tokens=20, output_tokens=3), 0.0)
    first, done = _run(engine)[0]
    assert first == pytest.approx(0.03)
    assert done == pytest.approx(0.03 + 2 * 0.012)


def test_requests_sent_together_share_one_prefill_step() -> None:
    engine = EngineModel(EngineProfile("sglang", COST))
    for rid in range(3):
        engine.submit(EngineRequest(rid, prompt_tokens=20, output_tokens=1), 0.0)
    assert [t[0] for t in _run(engine).values()] == [pytest.approx(0.07)] * 3


def test_a_long_prompt_is_prefilled_in_chunks() -> None:
    engine = EngineModel(EngineProfile("sglang", COST, prefill_chunk_tokens=100))
    engine.submit(EngineRequest(0, prompt_tokens=250, output_tokens=1), 0.0)
    assert _run(engine)[0][0] == pytest.approx(3 * 0.01 + 0.25)
    assert engine.steps == 3


def test_a_request_whose_adapter_needs_a_slot_too_many_waits_and_those_behind_go() -> None:
    profile = EngineProfile("sglang", COST, adapter_slots=1, base_takes_a_slot=True)
    engine = EngineModel(profile)
    engine.submit(EngineRequest(0, 10, 5, adapter="x", rank=8), 0.0)
    engine.submit(EngineRequest(1, 10, 5, adapter="y", rank=8), 0.0)  # x holds the one slot
    engine.submit(EngineRequest(2, 10, 5, adapter="x", rank=8), 0.0)
    first = {rid: t[0] for rid, t in _run(engine).items()}
    assert first[2] == first[0] < first[1]


def test_vllm_does_not_count_the_base_model_as_a_slot() -> None:
    engine = EngineModel(EngineProfile("vllm", COST, adapter_slots=1, base_takes_a_slot=False))
    engine.submit(EngineRequest(0, 10, 2, adapter="x", rank=8), 0.0)
    engine.submit(EngineRequest(1, 10, 2), 0.0)
    first = {rid: t[0] for rid, t in _run(engine).items()}
    assert first[0] == first[1]


def test_the_fit_recovers_the_costs_of_a_recorded_sweep() -> None:
    truth = StepCost(base_s=0.008, decode_seq_s=0.0015, prefill_token_s=0.0009, prefill_seq_s=0.002)
    sweep = []
    for concurrency in (1, 2, 4, 8):
        for prompt in (24, 300):
            prefill = truth.seconds(
                BatchShape(prefill_tokens=concurrency * prompt, prefill_seqs=concurrency)
            )
            decode = truth.seconds(BatchShape(decode_seqs=concurrency))
            sweep.append(MeasuredRequest(concurrency, prompt, 32, prefill, prefill + 31 * decode))
    fitted = fit_step_cost(samples_from_requests(sweep))
    assert fitted.coefficients() == pytest.approx(truth.coefficients(), abs=1e-9)


def test_the_fit_keeps_every_cost_non_negative() -> None:
    samples = samples_from_requests(
        [MeasuredRequest(1, 24, 2, 0.03, 0.03), MeasuredRequest(4, 24, 2, 0.02, 0.02)]
    )
    fitted = fit_step_cost(samples, terms=("base_s", "prefill_token_s"))
    assert min(fitted.coefficients()) >= 0.0


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_each_reference_profile_was_fitted_on_a_live_engine_and_says_how(kind: str) -> None:
    profile = load_profile(f"{kind}-cpu")
    assert profile.kind == kind and profile.name == f"{kind}-cpu"
    source = profile.source
    assert source["made_by"].startswith(f"loraplex bench calibrate --kind {kind} ")
    assert source["date"] and "cores" in source["host"] and source["load_1min"]["max"] >= 0
    assert source["held_out"], "the fit's check on loads it was not fitted on"
    assert min(profile.step.coefficients()) >= 0.0 and profile.step.base_s > 0.0


def test_a_faster_profile_scales_every_step() -> None:
    profile = load_profile("sglang-cpu")
    batch = BatchShape(decode_seqs=4, prefill_tokens=24, prefill_seqs=1)
    assert profile.faster(10).step.seconds(batch) == pytest.approx(profile.step.seconds(batch) / 10)


def test_calibrate_writes_a_profile_that_reloads_from_a_recorded_sweep(tmp_path) -> None:
    from loraplex.bench.calibrate import profile_from_sweep

    truth = StepCost(base_s=0.006, decode_seq_s=0.001, prefill_token_s=0.0005)
    sweep = [
        MeasuredRequest(
            c,
            p,
            16,
            truth.seconds(BatchShape(prefill_tokens=c * p, prefill_seqs=c)),
            truth.seconds(BatchShape(prefill_tokens=c * p, prefill_seqs=c))
            + 15 * truth.seconds(BatchShape(decode_seqs=c)),
        )
        for c in (1, 2, 4, 8)
        for p in (20, 400)
    ]
    profile = profile_from_sweep("vllm", sweep, {"name": "vllm-calibrated", "date": "today"})
    path = tmp_path / "profile.json"
    path.write_text(profile.to_json())
    loaded = load_profile(path)
    assert loaded == profile
    assert loaded.step.coefficients() == pytest.approx(truth.coefficients(), abs=1e-9)
    assert not loaded.base_takes_a_slot


def _recorded_group(truth: StepCost, concurrency: int, prompt: int, output: int):  # type: ignore[no-untyped-def]
    from loraplex.bench.calibrate import Group, Variant

    prefill = truth.seconds(
        BatchShape(prefill_tokens=concurrency * prompt, prefill_seqs=concurrency)
    )
    total = prefill + (output - 1) * truth.seconds(BatchShape(decode_seqs=concurrency))
    request = MeasuredRequest(concurrency, prompt, output, prefill, total)
    label = "short" if prompt < 100 else "long"
    return Group(label, concurrency, Variant(), (request,) * concurrency, total)


def test_a_recorded_sweep_fits_a_profile_that_predicts_its_held_out_loads() -> None:
    from loraplex.bench.calibrate import fit_record, record_of

    truth = StepCost(base_s=0.007, decode_seq_s=0.0012, prefill_token_s=0.0006, prefill_seq_s=0.001)
    groups = [_recorded_group(truth, c, p, 32) for c in (1, 2, 3, 4, 6, 8) for p in (20, 300)]
    record = record_of("sglang", "http://engine", "cmd", groups, [1.0, 2.0], {"kv_tokens": 8192})
    profile, _, held_out = fit_record(json.loads(json.dumps(record)), [1, 2, 4, 8], "test")
    assert profile.kv_tokens == 8192 and profile.source["load_1min"] == {"mean": 1.5, "max": 2.0}
    assert sorted(row.label.split()[3] for row in held_out) == ["x3", "x3", "x6", "x6"]
    for row in held_out:
        assert row.ttft_ms[1] == pytest.approx(row.ttft_ms[0], rel=1e-6)
        assert row.tokens_per_s[1] == pytest.approx(row.tokens_per_s[0], rel=1e-6)


def test_the_engine_limits_come_from_what_each_engine_reports() -> None:
    from loraplex.bench.calibrate import sglang_limits, vllm_limits

    info = {"max_total_num_tokens": 8192, "chunked_prefill_size": 4096, "max_loras_per_batch": 4}
    info |= {"internal_states": [{"effective_max_running_requests_per_dp": 2048}]}
    assert sglang_limits(info) == {
        "kv_tokens": 8192,
        "prefill_chunk_tokens": 4096,
        "adapter_slots": 4,
        "max_running": 2048,
    }
    metrics = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="512"} 1.0\n'
    assert vllm_limits(metrics) == {"kv_tokens": 8192}


def test_a_sweep_fits_an_adapter_cost_only_with_an_adapter_and_a_rank_cost_with_two_ranks() -> None:
    from loraplex.bench.calibrate import BASE_TERMS, Variant, terms_for

    assert terms_for([Variant()]) == BASE_TERMS
    assert terms_for([Variant(), Variant("a", 8)]) == (*BASE_TERMS, "adapter_s")
    assert terms_for([Variant(), Variant("a", 8), Variant("b", 32)])[-1] == "rank_s"
