"""The gate's decision: the threshold, then the baseline and its margin."""

from __future__ import annotations

from loraplex.evals.gate import decide

GATE = {"threshold": 0.8, "margin": 0.1}


def test_a_version_below_the_threshold_is_not_promoted() -> None:
    decision = decide(0.7, None, GATE, has_baseline=False)
    assert not decision.promote and "below the threshold" in decision.reason


def test_a_version_at_the_threshold_without_baseline_is_promoted() -> None:
    assert decide(0.8, None, GATE, has_baseline=False).promote


def test_a_version_must_beat_the_baseline_by_the_margin() -> None:
    assert not decide(0.85, 0.8, GATE, has_baseline=True).promote
    assert decide(0.95, 0.8, GATE, has_baseline=True).promote


def test_a_failed_run_never_promotes() -> None:
    assert not decide(None, None, GATE, has_baseline=False).promote
    assert not decide(0.9, None, GATE, has_baseline=True).promote
