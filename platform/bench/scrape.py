"""Read a Prometheus histogram off a running server, and its quantiles between two reads.

The benches use this to report what a server measured about itself during one round: read
before and after, subtract, and estimate a quantile from the bucket counts the way
PromQL's `histogram_quantile` does (linear within the bucket).
"""

from __future__ import annotations

import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

Buckets = dict[float, float]  # upper bound -> cumulative count


def read_histogram(url: str, name: str, **labels: str) -> Buckets:
    """The cumulative buckets of histogram `name` with `labels`, from `url`/metrics."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    buckets: Buckets = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name != f"{name}_bucket":
                continue
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                buckets[float(sample.labels["le"])] = sample.value
    return buckets


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
