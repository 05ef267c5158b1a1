"""A canary's sample eval: the verdict's check on both versions' pass rates (pure), the rule
for an eval that can grade live prompts, the bounds on what is kept, and the replay of a
kept prompt as an eval item."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import fakeredis
import jsonschema_rs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loraplex.control.canary.policy import (
    CanaryPolicy,
    RunScore,
    SampleEval,
    SampleScores,
    Verdict,
    VersionStats,
    decide,
)
from loraplex.control.canary.sample_eval import live_prompt_problem
from loraplex.control.canary.samples import (
    MAX_PROMPT_BYTES,
    PromptSampler,
    SampleSpec,
    sample_spec,
)
from loraplex.evals.generate import request_body

SAMPLE = SampleEval("eval_x", sample_size=4, max_pass_rate_drop=0.1)
POLICY = CanaryPolicy(60, 20, 0.02, 1.5, SAMPLE)
STABLE = VersionStats(200, 0, 0.1)
CANARY = VersionStats(40, 0, 0.1)  # passes every other check


def _scores(stable: tuple[str, int], canary: tuple[str, int], total: int = 4) -> SampleScores:
    return SampleScores(
        4, RunScore("evalrun_s", stable[0], stable[1], total),
        RunScore("evalrun_c", canary[0], canary[1], total),
    )  # fmt: skip


def test_a_canary_failing_the_sample_eval_is_rolled_back_before_its_window_ends() -> None:
    decision = decide(STABLE, CANARY, POLICY, 10, _scores(("completed", 4), ("completed", 1)))
    assert decision.verdict is Verdict.ROLLBACK
    assert "sample eval pass rate 25.0% (1 of 4 live prompts)" in decision.reasons[0]
    assert "stable's 100.0% (at most 10.0 points lower)" in decision.reasons[0]
    shown = decision.figures["sample_eval"]
    assert shown["stable"]["pass_rate"] == 1.0 and shown["canary"]["pass_rate"] == 0.25
    assert shown["stable"]["run_id"] == "evalrun_s" and shown["canary"]["run_id"] == "evalrun_c"
    assert shown["pass_rate_drop"] == 0.75


def test_a_drop_within_the_bound_is_promoted_once_the_window_has_passed() -> None:
    scores = _scores(("completed", 10), ("completed", 9), total=10)
    assert decide(STABLE, CANARY, POLICY, 30, scores).verdict is Verdict.WAIT
    decision = decide(STABLE, CANARY, POLICY, 60, scores)
    assert decision.verdict is Verdict.PROMOTE  # 0.1 lower: exactly at the bound
    assert "sample eval pass rate 90.0%" in decision.reasons[-1]


def test_promotion_waits_for_the_sample_to_fill_then_for_both_runs() -> None:
    filling = decide(STABLE, CANARY, POLICY, 600, SampleScores(kept=3))
    assert filling.verdict is Verdict.WAIT
    assert filling.reasons == ("checks met; waiting for the sample eval: 3 of 4 live prompts kept",)
    running = decide(STABLE, CANARY, POLICY, 600, _scores(("completed", 4), ("in_progress", 0)))
    assert running.verdict is Verdict.WAIT
    assert "sample eval running (evalrun_s, evalrun_c)" in running.reasons[0]


def test_a_run_that_failed_or_was_deleted_rolls_the_canary_back() -> None:
    failed = SampleScores(4, RunScore("evalrun_s", "completed", 4, 4),
                          RunScore("evalrun_c", "failed", error="budget spent"))  # fmt: skip
    decision = decide(STABLE, CANARY, POLICY, 10, failed)
    assert decision.verdict is Verdict.ROLLBACK
    assert decision.reasons == ("the sample eval run evalrun_c of canary failed: budget spent",)
    deleted = SampleScores(4, RunScore("evalrun_s", "completed", 4, 4), RunScore("", "deleted"))
    assert decide(STABLE, CANARY, POLICY, 10, deleted).reasons == (
        "the sample eval run of canary was deleted",
    )
    gone = decide(
        STABLE, CANARY, POLICY, 10, SampleScores(error="the eval eval_x no longer exists")
    )
    assert gone.verdict is Verdict.ROLLBACK
    assert gone.reasons == ("the sample eval could not run: the eval eval_x no longer exists",)


def test_below_its_minimum_requests_a_canary_waits_whatever_its_sample_eval_says() -> None:
    decision = decide(STABLE, VersionStats(5, 0, 0.1), POLICY, 10, _scores(("completed", 4),
                                                                           ("completed", 0)))  # fmt: skip
    assert decision.verdict is Verdict.WAIT and decision.waiting_for_traffic


def test_without_a_sample_eval_no_sample_is_read_or_shown() -> None:
    plain = CanaryPolicy(60, 20, 0.02, 1.5)
    decision = decide(STABLE, CANARY, plain, 60, _scores(("completed", 4), ("completed", 0)))
    assert decision.verdict is Verdict.PROMOTE
    assert "sample_eval" not in decision.figures
    assert "sample_eval" not in plain.to_json()


def test_the_policy_with_its_sample_eval_survives_its_stored_form() -> None:
    assert CanaryPolicy.from_json(POLICY.to_json()) == POLICY
    assert CanaryPolicy.from_json(CanaryPolicy(60, 20, 0.02, 1.5).to_json()).sample_eval is None


@given(
    st.sampled_from(["queued", "in_progress", "completed", "failed", "canceled", "deleted"]),
    st.sampled_from(["queued", "in_progress", "completed", "failed", "canceled", "deleted"]),
    st.integers(0, 4), st.integers(0, 4), st.integers(0, 5), st.floats(0, 600),
)  # fmt: skip
def test_no_canary_is_promoted_before_both_runs_completed_within_the_drop(
    stable_status: str, canary_status: str, stable_ok: int, canary_ok: int, kept: int,
    elapsed: float,
) -> None:  # fmt: skip
    started = kept >= 4
    sample = SampleScores(
        kept,
        RunScore("s", stable_status, stable_ok, 4) if started else None,
        RunScore("c", canary_status, canary_ok, 4) if started else None,
    )
    decision = decide(STABLE, CANARY, POLICY, elapsed, sample)
    if decision.verdict is Verdict.PROMOTE:
        assert started and stable_status == canary_status == "completed"
        assert (stable_ok - canary_ok) / 4 <= SAMPLE.max_pass_rate_drop + 1e-9


SCHEMA_OF_INPUT = {"type": "object", "properties": {"input": {"type": "array"}}}
JUDGE = {"type": "string_check", "name": "polite", "operation": "ilike",
         "input": "{{sample.output_text}}", "reference": "please"}  # fmt: skip


def test_an_eval_grading_live_prompts_needs_no_reference_field() -> None:
    ok = jsonschema_rs.validator_for(SCHEMA_OF_INPUT)
    assert live_prompt_problem(ok, [JUDGE]) is None
    echo = {**JUDGE, "name": "echo", "reference": "{{item.input.0.content}}"}
    assert live_prompt_problem(ok, [echo]) is None

    needs = jsonschema_rs.validator_for({**SCHEMA_OF_INPUT, "required": ["input", "expected"]})
    problem = live_prompt_problem(needs, [JUDGE])
    assert problem and "item_schema must accept live prompts" in problem and "expected" in problem

    reference = {**JUDGE, "name": "exact", "operation": "eq", "reference": "{{item.expected}}"}
    problem = live_prompt_problem(ok, [JUDGE, reference])
    assert problem and problem.startswith("testing_criteria[1] (exact) refers to {{item.expected}}")


def test_only_a_policy_with_a_sample_eval_marks_its_requests_for_keeping() -> None:
    alias, started = uuid4(), datetime(2026, 1, 1, tzinfo=UTC)
    plain = CanaryPolicy(60, 20, 0.02, 1.5)
    assert sample_spec(alias, started, plain.to_json()) is None
    assert sample_spec(alias, None, POLICY.to_json()) is None
    spec = sample_spec(alias, started, POLICY.to_json())
    assert spec == SampleSpec(f"loraplex:canary:prompts:{alias.hex}:1767225600000", 4, 256)


def _request(content: str, **options: Any) -> Any:
    chosen = SimpleNamespace(**{"tools": None, "response_format": None, **options})
    return SimpleNamespace(messages=[{"role": "user", "content": content}], options=chosen)


async def test_the_sampler_keeps_the_first_prompts_only_and_never_the_unkeepable() -> None:
    redis = fakeredis.FakeAsyncRedis()
    sampler = PromptSampler(redis)
    spec = SampleSpec("loraplex:canary:prompts:a:1", size=4, max_tokens=64)
    sampler.keep(spec, _request("x" * (MAX_PROMPT_BYTES + 1)), room=1000)  # too long
    sampler.keep(spec, _request("tools", tools=[{"type": "function"}]), room=1000)
    sampler.keep(spec, _request("format", response_format={"type": "json_object"}), room=1000)
    sampler.keep(spec, _request("no room for the answer"), room=63)
    sampler.keep(spec, SimpleNamespace(messages=None, options=None), room=1000)  # completion
    await sampler.flush()
    assert await sampler.count(spec.key) == 0

    for n in range(10):  # more than the sample in one flush: only `size` are sent
        sampler.keep(spec, _request(f"p{n}"), room=1000)
    await sampler.flush()
    for n in range(10, 12):  # the list is full: not even offered to Redis
        sampler.keep(spec, _request(f"p{n}"), room=1000)
    assert sampler._pending == []
    kept = await sampler.read(spec.key, spec.size)
    assert [p[0]["content"] for p in kept] == ["p0", "p1", "p2", "p3"]
    assert 0 < await redis.ttl(spec.key) <= 900
    await sampler.drop(spec.key)
    assert await sampler.count(spec.key) == 0


async def test_a_redis_failure_drops_the_pending_prompts_and_raises_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = fakeredis.FakeServer()
    server.connected = False
    sampler = PromptSampler(fakeredis.FakeAsyncRedis(server=server))
    sampler.keep(SampleSpec("k", 4, 16), _request("hello"), room=100)
    await sampler.flush()
    assert sampler._pending == []
    assert "1 canary prompt samples dropped" in caplog.text


def test_a_kept_prompt_is_replayed_as_it_was_through_an_item_reference() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    source = {"input_messages": {"type": "item_reference", "item_reference": "item.input"},
              "model": "a@v2", "sampling_params": {"temperature": 0,
                                                   "max_completion_tokens": 8}}  # fmt: skip
    body = request_body(source, {"input": messages})
    assert body == {"model": "a@v2", "messages": messages, "temperature": 0, "max_tokens": 8}
    assert request_body(source, {"other": 1})["messages"] == []
