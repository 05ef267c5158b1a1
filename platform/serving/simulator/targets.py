"""The issue's targets as checks over a scenario's rows: each one PASS or FAIL with its numbers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loraplex.serving.simulator.scenarios import (
    AWARE,
    BELADY_NAME,
    BLIND,
    DEFAULT_NAME,
    LRU_NAME,
)

Rows = dict[str, dict[str, Any]]

MIN_COLD_LOAD_CUT = 0.30  # scan: the default needs at least this many fewer cold loads than lru
MAX_OTHERS_P99_RATIO = 1.25  # scan: others' p99 with the scanner / without it
MAX_SCALE_WALL_S = 60.0
# Stationary and shifting: the default's cold loads as a multiple of Belady's at most this.
# Belady here evicts the entry needed farthest ahead and ignores size, so it bounds the
# count only for equal sizes; a size-aware policy can come in under it (see the sweep).
MAX_BELADY_GAP = {"stationary": 1.0, "shifting": 1.1}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One target: whether it holds and the numbers behind the answer."""

    target: str
    passed: bool
    measured: str

    def line(self) -> str:
        """`PASS  target: numbers`, for the report."""
        return f"{'PASS' if self.passed else 'FAIL'}  {self.target}: {self.measured}"


def _belady_gap(scenario: str, rows: Rows) -> Verdict:
    default, bound = rows[DEFAULT_NAME]["cold_loads"], rows[BELADY_NAME]["cold_loads"]
    gap, limit = default / bound, MAX_BELADY_GAP[scenario]
    return Verdict(
        f"default's cold loads <= {limit:.2f}x belady's",
        gap <= limit,
        f"{default:,} vs {bound:,} ({gap:.2f}x)",
    )


def _fewer_cold_loads_than_lru(rows: Rows) -> Verdict:
    lru, default = rows[LRU_NAME], rows[DEFAULT_NAME]
    return Verdict(
        "default has fewer cold loads than lru",
        default["cold_loads"] < lru["cold_loads"],
        f"{default['cold_loads']:,} vs {lru['cold_loads']:,}",
    )


def _stationary(rows: Rows) -> list[Verdict]:
    lru, default = rows[LRU_NAME], rows[DEFAULT_NAME]
    return [
        _fewer_cold_loads_than_lru(rows),
        Verdict(
            "default has lower p99 TTFT than lru",
            default["ttft_p99_s"] < lru["ttft_p99_s"],
            f"{default['ttft_p99_s']:.3f} s vs {lru['ttft_p99_s']:.3f} s",
        ),
        _belady_gap("stationary", rows),
    ]


def _shifting(rows: Rows) -> list[Verdict]:
    return [_fewer_cold_loads_than_lru(rows), _belady_gap("shifting", rows)]


def _scan(rows: Rows) -> list[Verdict]:
    lru, default = rows[LRU_NAME], rows[DEFAULT_NAME]
    cut = 1.0 - default["cold_loads"] / lru["cold_loads"]
    ratio = default["others_p99_ratio"]
    return [
        Verdict(
            f"default has >= {MIN_COLD_LOAD_CUT:.0%} fewer cold loads than lru",
            cut >= MIN_COLD_LOAD_CUT,
            f"{default['cold_loads']:,} vs {lru['cold_loads']:,} ({cut:.1%} fewer)",
        ),
        Verdict(
            f"default: others' p99 with scanner <= {MAX_OTHERS_P99_RATIO}x without",
            ratio <= MAX_OTHERS_P99_RATIO,
            f"{default['others_ttft_p99_s']:.3f} s / "
            f"{default['others_p99_without_scanner_s']:.3f} s = {ratio:.2f}x",
        ),
    ]


def _rank_aware(rows: Rows) -> list[Verdict]:
    blind, aware = rows[BLIND], rows[AWARE]
    return [
        Verdict(
            "rank-aware keeps more adapters resident per GB of slot memory",
            aware["resident_per_slot_gb"] > blind["resident_per_slot_gb"],
            f"{aware['resident_per_slot_gb']:.2f} vs {blind['resident_per_slot_gb']:.2f} per GB",
        )
    ]


def _scale(rows: Rows) -> list[Verdict]:
    wall = rows[DEFAULT_NAME]["wall_s"]
    return [
        Verdict(
            f"simulated in < {MAX_SCALE_WALL_S:.0f} s", wall < MAX_SCALE_WALL_S, f"{wall:.1f} s"
        )
    ]


CHECKS: dict[str, Callable[[Rows], list[Verdict]]] = {
    "stationary": _stationary,
    "shifting": _shifting,
    "scan": _scan,
    "rank-aware": _rank_aware,
    "scale": _scale,
}


def check(scenario: str, rows: list[dict[str, Any]]) -> list[Verdict]:
    """The verdicts for one scenario's rows; none for a scenario without targets."""
    checker = CHECKS.get(scenario)
    return checker({row["policy"]: row for row in rows}) if checker else []
