"""Correctness probes' pure parts: the verdict, the probe prompts, and a barred engine."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loraplex.serving.policy import (
    TIER_COSTS,
    AdapterVersion,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Request,
    Routed,
)
from loraplex.serving.probes import Verdict, judge
from loraplex.serving.probes.prompts import GENERIC_PROMPTS, prompts_from_training

RECORDED = ["a", "b", "c", "d"]


def test_all_answers_alike_pass() -> None:
    assert judge(RECORDED, list(RECORDED)).verdict is Verdict.PASSED


def test_a_majority_of_answers_differing_fails() -> None:
    judged = judge(RECORDED, ["a", "x", "y", "z"])
    assert (judged.verdict, judged.matched, judged.differed) == (Verdict.FAILED, 1, 3)


def test_half_the_answers_differing_is_no_majority() -> None:
    assert judge(RECORDED, ["a", "b", "y", "z"]).verdict is Verdict.PASSED


def test_an_engine_that_answers_too_few_probes_is_inconclusive() -> None:
    assert judge(RECORDED, ["a", "b", None, None]).verdict is Verdict.INCONCLUSIVE


def test_a_replay_must_cover_every_recorded_probe() -> None:
    with pytest.raises(ValueError):
        judge(RECORDED, ["a"])


@given(st.lists(st.sampled_from(["a", "b", None]), min_size=4, max_size=4))
def test_only_a_majority_of_differing_answers_fails(replayed: list[str | None]) -> None:
    differing = sum(1 for r, a in zip(RECORDED, replayed, strict=True) if a not in (None, r))
    assert (judge(RECORDED, replayed).verdict is Verdict.FAILED) == (differing > 2)


def _row(prompt: str) -> bytes:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": prompt}]
    return json.dumps({"messages": [*messages, {"role": "assistant", "content": "r"}]}).encode()


def test_probe_prompts_come_from_the_training_file_first_user_messages() -> None:
    head = b"\n".join([_row("one"), b"{not json", _row("two"), _row("one"), b'{"messages": [{"ro'])
    assert prompts_from_training(head) == ["one", "two", *GENERIC_PROMPTS[:2]]


def test_a_training_file_without_chat_rows_gets_the_generic_prompts() -> None:
    assert prompts_from_training(b"[1, 2]\n") == list(GENERIC_PROMPTS)


def test_a_barred_engine_gets_no_requests_for_that_version() -> None:
    nodes = [NodeSpec(n, 64, gpu_slots=2, host_slots=2, disk_budget_bytes=10**9) for n in "ab"]
    versions = [AdapterVersion("v", "t", 8, 10**6), AdapterVersion("w", "t", 8, 10**6)]
    core = PolicyCore(nodes, versions, TIER_COSTS, PolicyConfig())
    core.cluster.barred["v"] = {"a"}
    routed = [core.route(Request(i, "t", "v", 0.0), 0.0) for i in range(6)]
    assert {r.node_id for r in routed if isinstance(r, Routed)} == {"b"}
    core.cluster.barred["v"].add("b")
    assert not core.cluster.servable(versions[0]) and core.cluster.servable(versions[1])
