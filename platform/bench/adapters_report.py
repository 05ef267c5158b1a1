"""One way's figures from its answers, and the table that puts the ways side by side."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from loraplex.bench.adapters_replay import Answer

WAITED_S = 2.0  # a request whose first token took longer than this "waited"
MIN_ADAPTER_REQUESTS = 20  # adapters with fewer are left out of the per-adapter p99s


@dataclass(frozen=True, slots=True)
class WayStats:
    """What the table prints for one way of serving the trace."""

    way: str
    requests: int
    failed: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    ttft_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    tokens_per_s: float
    waited_over_2s: int
    worst_adapter_p99_ms: float  # among adapters with enough requests, scan excluded
    median_adapter_p99_ms: float
    answers_equal: int  # sampled answers equal to PEFT's ...
    answers_checked: int  # ... out of this many
    # tier -> loads during the way: for the gateway, the requests that found their adapter
    # in the object store (cold) or not on the engine (host); requests waiting on the same
    # load count once each, so these are at least the loads made (and the bound)
    loads: dict[str, int] = field(default_factory=dict)
    bounds: dict[str, int] = field(default_factory=dict)  # tier -> no policy goes below
    failures: dict[str, int] = field(default_factory=dict)  # why ("503", ...) -> how many

    def row(self) -> dict[str, Any]:
        """The JSON record."""
        return asdict(self)


def _ms(values: list[float], q: float) -> float:
    return 1000 * float(np.percentile(values, q)) if values else float("nan")


def way_stats(
    way: str,
    answers: list[Answer],
    wall_s: float,
    is_scan: Callable[[int], bool],
    checked: tuple[int, int],
    loads: dict[str, int],
    bounds: dict[str, int],
) -> WayStats:
    """Summarise one way's answers; `checked` is (equal to PEFT's, compared)."""
    done = [a for a in answers if a.ok]
    ttfts, e2es = [a.ttft_s for a in done], [a.e2e_s for a in done]
    worst, median = adapter_p99s(done, is_scan)
    return WayStats(
        way=way,
        requests=len(answers),
        failed=len(answers) - len(done),
        ttft_p50_ms=_ms(ttfts, 50),
        ttft_p95_ms=_ms(ttfts, 95),
        ttft_p99_ms=_ms(ttfts, 99),
        e2e_p50_ms=_ms(e2es, 50),
        e2e_p99_ms=_ms(e2es, 99),
        tokens_per_s=sum(a.tokens for a in done) / wall_s if wall_s > 0 else float("nan"),
        waited_over_2s=sum(a.ttft_s > WAITED_S for a in done),
        worst_adapter_p99_ms=worst,
        median_adapter_p99_ms=median,
        answers_equal=checked[0],
        answers_checked=checked[1],
        loads=loads,
        bounds=bounds,
        failures=dict(Counter(a.error for a in answers if not a.ok)),
    )


def adapter_p99s(done: list[Answer], is_scan: Callable[[int], bool]) -> tuple[float, float]:
    """The worst and the median per-adapter TTFT p99 (ms) among adapters with at least
    `MIN_ADAPTER_REQUESTS` requests, the scanner's excluded; NaN when none has that many."""
    by_adapter: dict[int, list[float]] = {}
    for a in done:
        if not is_scan(a.adapter):
            by_adapter.setdefault(a.adapter, []).append(a.ttft_s)
    p99s = [_ms(t, 99) for t in by_adapter.values() if len(t) >= MIN_ADAPTER_REQUESTS]
    if not p99s:
        return float("nan"), float("nan")
    return max(p99s), statistics.median(p99s)


COLUMNS = (
    ("way", "{:<24}", "way"),
    ("req", "{:>5}", "requests"),
    ("fail", "{:>4}", "failed"),
    ("TTFT p50", "{:>9.0f}", "ttft_p50_ms"),
    ("p95", "{:>7.0f}", "ttft_p95_ms"),
    ("p99", "{:>7.0f}", "ttft_p99_ms"),
    ("E2E p50", "{:>8.0f}", "e2e_p50_ms"),
    ("p99", "{:>7.0f}", "e2e_p99_ms"),
    ("tok/s", "{:>6.1f}", "tokens_per_s"),
    (">2s", "{:>4}", "waited_over_2s"),
    ("worst ad p99", "{:>12.0f}", "worst_adapter_p99_ms"),
    ("median ad p99", "{:>13.0f}", "median_adapter_p99_ms"),
)


def table(ways: list[WayStats]) -> str:
    """The ways side by side (times in ms), then each way's loads by tier against the bound
    and its answers against PEFT's."""
    header = " ".join(
        title.ljust(24) if key == "way" else title.rjust(len(fmt.format(0)))
        for title, fmt, key in COLUMNS
    )
    lines = [header]
    for way in ways:
        values = way.row()
        lines.append(" ".join(fmt.format(values[key]) for _, fmt, key in COLUMNS))
    for way in ways:
        tiers = ", ".join(
            f"{tier} {n}" + (f" (bound {way.bounds[tier]})" if tier in way.bounds else "")
            for tier, n in way.loads.items()
        )
        failed = ", ".join(f"{n} x {why}" for why, n in sorted(way.failures.items()))
        lines.append(
            f"{way.way}: loads {tiers or 'not measured'}; answers equal to PEFT's "
            f"{way.answers_equal}/{way.answers_checked}" + (f"; failed: {failed}" if failed else "")
        )
    return "\n".join(lines)
