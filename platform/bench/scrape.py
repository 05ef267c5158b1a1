"""Read a Prometheus histogram off a running server, and its quantiles between two reads.

The benches use this to report what a server measured about itself during one round: read
before and after, subtract, and estimate a quantile from the bucket counts the way
PromQL's `histogram_quantile` does (linear within the bucket).
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loraplex.observability.quantiles import Buckets, quantile

__all__ = ["Buckets", "quantile", "read_histogram"]


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
