"""What this API process has measured about itself since it started, read from its own
Prometheus registry: the admin dashboard's live figures. (Across replicas, scrape
`/metrics` with Prometheus; the dashboard's per-minute chart comes from the database.)"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric

from loraplex.observability.metrics import REJECTION_REASONS
from loraplex.observability.quantiles import Buckets, quantile

TIERS = ("active", "loaded", "disk", "cold")  # cache hits, best first; cold is a miss


@dataclass(frozen=True)
class ReplicaStats:
    """Totals since start, TTFT quantiles, and where requests found their adapters."""

    requests: int
    server_errors: int  # answered 5xx
    refused: int  # answered 4xx (bad input, quotas, admission)
    prompt_tokens: int
    completion_tokens: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    cache_hits: dict[str, int]
    stream_aborts: dict[str, int]
    rejections: dict[str, int]

    @property
    def hit_ratio(self) -> dict[str, float]:
        """Each tier's share of adapter lookups."""
        total = sum(self.cache_hits.values())
        return {tier: self.cache_hits.get(tier, 0) / total if total else 0.0 for tier in TIERS}


def replica_stats(registry: CollectorRegistry = REGISTRY) -> ReplicaStats:
    """Read the gateway's metrics off `registry` (default: this process's)."""
    families = {family.name: family for family in registry.collect()}
    requests = _sum_by(families.get("loraplex_inference_requests"), "status")
    ttft = _histogram(families.get("loraplex_ttft_seconds"))
    return ReplicaStats(
        requests=sum(requests.values()),
        server_errors=sum(n for status, n in requests.items() if status.startswith("5")),
        refused=sum(n for status, n in requests.items() if status.startswith("4")),
        prompt_tokens=_sum_by(families.get("loraplex_tokens"), "kind").get("prompt", 0),
        completion_tokens=_sum_by(families.get("loraplex_tokens"), "kind").get("completion", 0),
        ttft_p50_ms=1000 * quantile({}, ttft, 0.5),
        ttft_p99_ms=1000 * quantile({}, ttft, 0.99),
        cache_hits=_sum_by(families.get("loraplex_adapter_cache_hits"), "tier"),
        stream_aborts=_sum_by(families.get("loraplex_stream_aborts"), "reason"),
        rejections=_sum_by(families.get("loraplex_admission_rejections"), "reason"),
    )


@dataclass(frozen=True)
class RefusalCount:
    """One reason a tenant's requests were refused, and how often, since this process started."""

    reason: str  # the `reason` label of loraplex_admission_rejections
    status: int | None  # what the client got: 429 or 503 (None: a reason this UI does not know)
    meaning: str
    count: int


def tenant_refusals(
    tenant_id: UUID | str, registry: CollectorRegistry = REGISTRY
) -> list[RefusalCount]:
    """This process's admission refusals of one tenant by reason, most frequent first.

    Only tenants with a metric label of their own show here (`TenantLabeler`: by default
    the first 100 a process sees; the rest share "other"). Across replicas, Prometheus has
    the totals.
    """
    family = {f.name: f for f in registry.collect()}.get("loraplex_admission_rejections")
    counts: Counter[str] = Counter()
    for labels, value in _samples(family, "_total"):
        if labels.get("tenant") == str(tenant_id) and value:
            counts[labels.get("reason", "")] += int(value)
    rows = []
    for reason, count in counts.most_common():
        status, meaning = REJECTION_REASONS.get(reason, (None, reason))
        rows.append(RefusalCount(reason, status, meaning, count))
    return rows


def _samples(family: Metric | None, suffix: str) -> Iterable[tuple[dict[str, str], float]]:
    if family is None:
        return []
    return [(s.labels, s.value) for s in family.samples if s.name == family.name + suffix]


def _sum_by(family: Metric | None, label: str) -> dict[str, int]:
    """A counter's totals per value of one label, summed over the others."""
    totals: Counter[str] = Counter()
    for labels, value in _samples(family, "_total"):
        totals[labels.get(label, "")] += int(value)
    return dict(totals)


def _histogram(family: Metric | None) -> Buckets:
    """A histogram's cumulative buckets, summed over its labels."""
    buckets: Buckets = {}
    for labels, value in _samples(family, "_bucket"):
        bound = float(labels["le"])
        buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def fmt_ms(value: float) -> str:
    """Milliseconds for the page; a dash before anything was measured."""
    return "—" if math.isnan(value) else f"{value:,.0f} ms"
