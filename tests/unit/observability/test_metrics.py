"""Metric names are stable and tenant labels stay bounded."""

from __future__ import annotations

from uuid import uuid4

from prometheus_client import REGISTRY, generate_latest

from loraplex.observability import metrics
from loraplex.observability.metrics import NO_TENANT, OTHER_TENANT, TenantLabeler

EXPECTED_FAMILIES = {
    "loraplex_inference_requests",
    "loraplex_ttft_seconds",
    "loraplex_tpot_seconds",
    "loraplex_gateway_overhead_seconds",
    "loraplex_tokens",
    "loraplex_engine_queue_depth",
    "loraplex_admission_rejections",
    "loraplex_adapter_loads",
    "loraplex_adapter_load_seconds",
    "loraplex_adapter_evictions",
    "loraplex_adapter_cache_hits",
    "loraplex_stream_aborts",
    "loraplex_fine_tune_jobs",
    "loraplex_quota_usage_ratio",
}


def test_every_metric_is_on_the_default_registry() -> None:
    families = {family.name for family in REGISTRY.collect()}
    assert families >= EXPECTED_FAMILIES


def test_observed_requests_show_in_the_exposition() -> None:
    metrics.observe_request("t-1", "tiny-base", 200, prompt_tokens=7, completion_tokens=3)
    metrics.observe_latency("tiny-base", ttft_s=0.2, total_s=0.4, completion_tokens=3)
    text = generate_latest(REGISTRY).decode()
    assert 'loraplex_inference_requests_total{model="tiny-base",status="200",tenant="t-1"}' in text
    assert 'loraplex_tokens_total{kind="completion",tenant="t-1"}' in text
    assert "loraplex_ttft_seconds_bucket" in text
    assert "loraplex_tpot_seconds_bucket" in text


def test_the_first_tenants_keep_their_own_label() -> None:
    labeler = TenantLabeler(max_tenants=2)
    first, second = uuid4(), uuid4()
    assert (labeler(first), labeler(second)) == (str(first), str(second))


def test_tenants_past_the_limit_share_the_other_label() -> None:
    labeler = TenantLabeler(max_tenants=3)
    labels = {labeler(uuid4()) for _ in range(50)}
    assert len(labels) == 4
    assert OTHER_TENANT in labels


def test_a_named_tenant_keeps_its_label_after_the_limit_is_reached() -> None:
    labeler = TenantLabeler(max_tenants=1)
    early = uuid4()
    labeler(early)
    labeler(uuid4())
    assert labeler(early) == str(early)


def test_a_tenant_given_as_uuid_or_string_takes_one_slot() -> None:
    labeler = TenantLabeler(max_tenants=1)
    tenant = uuid4()
    assert labeler(tenant) == labeler(str(tenant)) == str(tenant)
    assert labeler.num_named == 1


def test_requests_without_a_tenant_get_their_own_label() -> None:
    assert TenantLabeler(max_tenants=0)(None) == NO_TENANT
