"""Read a Prometheus histogram off a running server, and its quantiles between two reads.

The benches use this to report what a server measured about itself during one round: read
before and after, subtract, and estimate a quantile from the bucket counts the way
PromQL's `histogram_quantile` does (linear within the bucket).
"""

from __future__ import annotations

import os
import secrets

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loraplex.observability.quantiles import Buckets, quantile

__all__ = ["SCRAPE_TOKEN", "Buckets", "metrics_text", "quantile", "read_histogram"]

# The token the benches' API processes take for `/metrics` (`server.api_process` sets it
# where the environment names none) and the benches scrape with.
SCRAPE_TOKEN = os.environ.get("LORAPLEX_METRICS_TOKEN") or f"bench-{secrets.token_urlsafe(24)}"


def metrics_text(url: str) -> str:
    """The Prometheus text of the API process at `url`, scraped with `SCRAPE_TOKEN`."""
    headers = {"Authorization": f"Bearer {SCRAPE_TOKEN}"}
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    response.raise_for_status()
    return response.text


def read_histogram(url: str, name: str, **labels: str) -> Buckets:
    """The cumulative buckets of histogram `name` with `labels`, from `url`/metrics."""
    text = metrics_text(url)
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
