"""The issue's targets as checks over a scenario's rows: each one PASS or FAIL with its numbers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loraplex.serving.simulator.costs import TTFT_SLO_S
from loraplex.serving.simulator.scenarios import (
    AWARE,
    BELADY_NAME,
    BLIND,
    DEFAULT_NAME,
    LRU_NAME,
)
from loraplex.serving.simulator.workload import SCAN_TENANT

Rows = dict[str, dict[str, Any]]

# Scan: what the scanner may cost the other tenants in the default policy, as a multiple of
# what they get in the same policy without it (why these measures: `_scan`). Cold loads:
# containment kept them within 0.98-1.01x over seeds 0-9 (placement noise, either sign);
# without containment they are 1.32-1.73x, under lru 2.5-3.9x. SLO misses: 0.96-1.22x;
# without containment 2.6-3.7x, under lru 2.6-4.5x.
MAX_OTHERS_COLD_LOAD_RATIO = 1.10
MAX_OTHERS_SLO_MISS_RATIO = 1.25
# The scan's first targets, still reported for every run but no longer gating (`_scan`).
MIN_COLD_LOAD_CUT = 0.30  # the default's cold loads, the scanner's included, below lru's
MAX_OTHERS_P99_RATIO = 1.25  # others' p99 with the scanner / without it
MAX_SCALE_WALL_S = 60.0
# Stationary and shifting: the default's cold loads as a multiple of Belady's at most this.
# Belady here evicts the entry needed farthest ahead inside the real system and ignores
# size: an oracle heuristic a size-aware policy can beat, not a bound. The true lower bound
# is every row's `cold_load_bound` (bound.py), reported beside it.
MAX_BELADY_GAP = {"stationary": 1.0, "shifting": 1.1}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One target: whether it holds and the numbers behind the answer.

    `gating=False` marks a superseded target that is still measured and reported, so
    nothing it used to show is hidden, but that no longer counts as a PASS or a FAIL.
    """

    target: str
    passed: bool
    measured: str
    gating: bool = True

    def line(self) -> str:
        """`PASS  target: numbers`, for the report; `INFO` and met/not met when not gating."""
        if self.gating:
            return f"{'PASS' if self.passed else 'FAIL'}  {self.target}: {self.measured}"
        return f"INFO  {self.target}: {self.measured} ({'met' if self.passed else 'not met'})"


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


def _ratio(with_scan: float, without: float) -> float:
    """with / without; none in either is no change, some from none is unbounded."""
    if without:
        return with_scan / without
    return float("inf") if with_scan else 1.0


def _scanner_cost(
    measure: str, lru: dict[str, Any], default: dict[str, Any]
) -> tuple[int, int, float, float]:
    """The others' `measure` with the scanner and without it, that ratio, and lru's ratio."""
    mine, quiet = default[measure], default[f"{measure}_without_scanner"]
    return mine, quiet, _ratio(mine, quiet), _ratio(lru[measure], lru[f"{measure}_without_scanner"])


def _others_cold_loads(lru: dict[str, Any], default: dict[str, Any]) -> Verdict:
    """Containment's job: the scanner's loads recycle its own space, not the others'."""
    mine, quiet, ratio, lru_ratio = _scanner_cost("others_cold_loads", lru, default)
    return Verdict(
        f"default: others' cold loads with scanner <= {MAX_OTHERS_COLD_LOAD_RATIO:.2f}x without",
        ratio <= MAX_OTHERS_COLD_LOAD_RATIO,
        f"{mine:,} vs {quiet:,} ({ratio:.2f}x; lru {lru_ratio:.2f}x)",
    )


def _others_slo_misses(lru: dict[str, Any], default: dict[str, Any]) -> Verdict:
    """The others' tail latency, counted: requests over the TTFT SLO or refused."""
    mine, quiet, ratio, lru_ratio = _scanner_cost("others_slo_misses", lru, default)
    return Verdict(
        f"default: others' requests over the {TTFT_SLO_S:g} s TTFT SLO with scanner "
        f"<= {MAX_OTHERS_SLO_MISS_RATIO}x without",
        ratio <= MAX_OTHERS_SLO_MISS_RATIO,
        f"{mine:,} vs {quiet:,} of {default['others_requests']:,} ({ratio:.2f}x; "
        f"lru {lru_ratio:.2f}x)",
    )


def _old_cold_load_cut(lru: dict[str, Any], default: dict[str, Any]) -> Verdict:
    """The first scan target, all tenants' cold loads against lru's, split by who loaded."""
    cut = 1.0 - default["cold_loads"] / lru["cold_loads"]
    scanner = default["tenant_cold_loads"].get(SCAN_TENANT, 0)
    lru_scanner = lru["tenant_cold_loads"].get(SCAN_TENANT, 0)
    return Verdict(
        f"old: default has >= {MIN_COLD_LOAD_CUT:.0%} fewer cold loads than lru",
        cut >= MIN_COLD_LOAD_CUT,
        f"{default['cold_loads']:,} vs {lru['cold_loads']:,} ({cut:.1%} fewer; scanner "
        f"{scanner:,} vs {lru_scanner:,}, others {default['others_cold_loads']:,} vs "
        f"{lru['others_cold_loads']:,})",
        gating=False,
    )


def _old_others_p99(default: dict[str, Any]) -> Verdict:
    ratio = default["others_p99_ratio"]
    return Verdict(
        f"old: default: others' p99 with scanner <= {MAX_OTHERS_P99_RATIO}x without",
        ratio <= MAX_OTHERS_P99_RATIO,
        f"{default['others_ttft_p99_s']:.3f} s / "
        f"{default['others_p99_without_scanner_s']:.3f} s = {ratio:.2f}x",
        gating=False,
    )


def _scan(rows: Rows) -> list[Verdict]:
    """What the scanner costs the other tenants under the default: cold loads and SLO misses.

    Both compare the others' numbers with the scanner against the same policy's run
    without it. The scan's first two targets are still reported (`old:`, not gating),
    because over seeds 0-9 they measured things no eviction decides:

    - All tenants' cold loads against lru's. The default's are the scanner's ~2,500, which
      is its 60/min budget over the run, spent in full on adapters that miss, plus the
      others' ~715, within 5% of the ~700 distinct adapters they ask for (compulsory).
      Lru's total swings from 3,979 to 5,520 with how much of the scan it happens to keep,
      so the 30% cut passed or failed with lru's luck. Lowering the scanner's count needs
      it to hit more than the ~58% of its requests its budget cannot pay for: ~180 of its
      300 adapters kept, ~9 GB of the cluster's 80 GB of disk; the quiet trace with 10 GB
      less disk already puts the others' p99 at 1.27-3.1x on four seeds.
    - The others' p99 ratio. Their TTFTs have two modes, ~0.6 s (rank-16 cold load) and
      ~2 s (rank-64 cold load), and the 99th percentile falls in the gap between them, so a
      few dozen requests move it by tens of percent (seed 4: 1.40x from 53 more requests
      over 0.81 s of 24,000), while lru, which lets the scanner triple the others' cold
      loads and SLO misses, passes it on four seeds (1.02-1.03x) because its p99 sits at ~2 s
      in both runs. Counting the requests over the SLO has no such gap.
    """
    lru, default = rows[LRU_NAME], rows[DEFAULT_NAME]
    return [
        _others_cold_loads(lru, default),
        _others_slo_misses(lru, default),
        _old_cold_load_cut(lru, default),
        _old_others_p99(default),
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
