"""Several seeds at once: each policy's cold loads as a multiple of the lower bound
(bound.py), and how many seeds pass each target. Pure: it reads the records `run_scenario`
returns and prints nothing.

One seed is one draw of the workload; a policy tuned to it can look better than it is, so
the issue's note reports the mean and the worst multiple over seeds 0-9 instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Gap:
    """One policy's cold loads over the bound in one scenario, across the seeds run."""

    scenario: str
    policy: str
    mean: float
    worst: float
    seeds: int


@dataclass(frozen=True, slots=True)
class PassCount:
    """How many of the seeds run passed one target."""

    scenario: str
    target: str
    passed: int
    seeds: int


SEED = re.compile(r"[0-9]{1,9}")  # ASCII digits: "²".isdigit() is true, int() refuses it


def parse_seeds(text: str) -> list[int]:
    """`0-9`, `0,3,7` or `0-4,8` as a sorted list of distinct seeds."""
    seeds: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        if not SEED.fullmatch(first) or (last and not SEED.fullmatch(last)):
            raise ValueError(f"not a seed or range of seeds: {part!r}")
        low, high = int(first), int(last or first)
        if high < low:
            raise ValueError(f"empty range of seeds: {part!r}")
        seeds.update(range(low, high + 1))
    return sorted(seeds)


def bound_gaps(records: Iterable[Record]) -> list[Gap]:
    """Per scenario, each policy's cold loads over the bound on the same trace: mean, worst."""
    ratios: dict[tuple[str, str], list[float]] = {}
    for record in records:
        for row in record["rows"]:
            ratios.setdefault((record["scenario"], row["policy"]), []).append(row["x_bound"])
    return [Gap(s, p, fmean(r), max(r), len(r)) for (s, p), r in ratios.items()]


def pass_counts(records: Iterable[Record]) -> list[PassCount]:
    """Per scenario and target, in the order first met: seeds passed out of seeds run."""
    counts: dict[tuple[str, str], list[int]] = {}
    for record in records:
        for verdict in record["targets"]:
            tally = counts.setdefault((record["scenario"], verdict["target"]), [0, 0])
            tally[0] += bool(verdict["passed"])
            tally[1] += 1
    return [PassCount(s, t, passed, runs) for (s, t), (passed, runs) in counts.items()]
