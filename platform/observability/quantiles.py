"""Quantiles from Prometheus histogram buckets, as PromQL's `histogram_quantile` estimates them
(linear within the bucket). Used by the benches (between two scrapes of a server) and by
the admin UI (this process's own histograms)."""

from __future__ import annotations

import math

Buckets = dict[float, float]  # upper bound -> cumulative count


def quantile(before: Buckets, after: Buckets, q: float) -> float:
    """The `q` quantile of the observations made between two reads; NaN when there were none."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return math.nan
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower  # past the last finite bucket: its bound is all we know
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower
