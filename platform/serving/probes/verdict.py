"""Judging a replay: recorded greedy answers against the ones an engine gives now (pure).

Greedy decoding (temperature 0) on the same engine kind, version and configuration gives the
same tokens every time (the parity tests show it for SGLang and vLLM), so any difference is
a signal. One differing answer can still be a benign fluke (a batch-shape dependent kernel);
a majority of an adapter's probes differing means the engine is not serving those weights.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class Verdict(enum.StrEnum):
    """What one replay says about an engine serving one subject (a version or the base)."""

    PASSED = "passed"  # most probes gave their recorded answer
    FAILED = "failed"  # a majority differed: the engine serves something else
    INCONCLUSIVE = "inconclusive"  # too few probes answered to tell


@dataclass(frozen=True, slots=True)
class Judgement:
    """A replay's verdict and the counts that led to it."""

    verdict: Verdict
    matched: int
    differed: int
    unanswered: int

    @property
    def total(self) -> int:
        """Probes replayed."""
        return self.matched + self.differed + self.unanswered


def judge(recorded: Sequence[str], replayed: Sequence[str | None]) -> Judgement:
    """Compare answers position by position; None is a probe the engine did not answer.

    Failed when more than half of all the probes differ; inconclusive when fewer than half
    were answered at all (an engine failing requests is the health check's business).
    """
    if len(recorded) != len(replayed):
        raise ValueError("a replay must answer every recorded probe, or None")
    matched = sum(1 for r, a in zip(recorded, replayed, strict=True) if a is not None and a == r)
    unanswered = sum(1 for a in replayed if a is None)
    differed = len(recorded) - matched - unanswered
    if 2 * differed > len(recorded):
        verdict = Verdict.FAILED
    elif not recorded or 2 * unanswered >= len(recorded):
        verdict = Verdict.INCONCLUSIVE
    else:
        verdict = Verdict.PASSED
    return Judgement(verdict, matched, differed, unanswered)
