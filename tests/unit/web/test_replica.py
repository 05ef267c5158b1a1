"""The admin dashboard's live figures, read off a Prometheus registry."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Histogram

from loraplex.gateway.admission.refusals import REASONS
from loraplex.observability.metrics import REJECTION_REASONS
from loraplex.web.replica import replica_stats, tenant_refusals


def test_totals_quantiles_and_hit_ratios_come_from_the_registry() -> None:
    registry = CollectorRegistry()
    requests = Counter(
        "loraplex_inference_requests", "", ["tenant", "model", "status"], registry=registry
    )
    ttft = Histogram(
        "loraplex_ttft_seconds", "", ["model"], buckets=(0.05, 0.1, 1.0), registry=registry
    )
    hits = Counter("loraplex_adapter_cache_hits", "", ["tier"], registry=registry)
    requests.labels("a", "m1", "200").inc(8)
    requests.labels("b", "m2", "200").inc(2)
    requests.labels("a", "m1", "429").inc(3)
    requests.labels("a", "m1", "503").inc(1)
    for seconds in [0.02] * 6 + [0.5] * 4:  # two models, one distribution
        ttft.labels("m1" if seconds < 0.1 else "m2").observe(seconds)
    hits.labels("active").inc(3)
    hits.labels("cold").inc(1)

    stats = replica_stats(registry)

    assert (stats.requests, stats.refused, stats.server_errors) == (14, 3, 1)
    assert stats.ttft_p50_ms < 50 < 100 < stats.ttft_p99_ms <= 1000
    assert stats.hit_ratio == {"active": 0.75, "loaded": 0.0, "disk": 0.0, "cold": 0.25}


def test_a_fresh_process_shows_no_figures_rather_than_zeros() -> None:
    stats = replica_stats(CollectorRegistry())
    assert stats.requests == 0 and math.isnan(stats.ttft_p50_ms)
    assert set(stats.hit_ratio.values()) == {0.0}


def test_a_tenants_refusals_are_its_own_by_reason_with_the_status_its_client_got() -> None:
    registry = CollectorRegistry()
    rejections = Counter(
        "loraplex_admission_rejections", "", ["reason", "tenant"], registry=registry
    )
    rejections.labels("rpm", "t1").inc(3)
    rejections.labels("engine_busy", "t1").inc(5)
    rejections.labels("rpm", "t2").inc(7)  # another tenant's
    rejections.labels("something_new", "t1").inc()

    rows = tenant_refusals("t1", registry)

    assert [(r.reason, r.status, r.count) for r in rows] == [
        ("engine_busy", 503, 5),
        ("rpm", 429, 3),
        ("something_new", None, 1),  # a reason the UI does not know still shows, by its name
    ]
    assert tenant_refusals("t3", registry) == []


def test_every_quota_refusal_reason_has_a_status_and_a_meaning() -> None:
    assert set(REASONS.values()) <= set(REJECTION_REASONS)
