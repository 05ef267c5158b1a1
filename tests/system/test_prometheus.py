"""A real Prometheus, run from the shipped configuration (deploy/observability/prometheus.yml
and rules.yaml), scrapes both API hosts with the scrape token and both engine hosts, and
after requests through the gateway finds every series the autoscaling queries and the
rules read, evaluates the rules, and fires no alert about a healthy cluster. With the two
real vLLM hosts up, it scrapes them and their agents as shipped too."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.system.adapters import ask, make_adapters
from tests.system.cluster import (
    API_HOSTS,
    ENGINE_HOSTS,
    FAKE_MODEL,
    REAL_ENGINE_HOSTS,
    REPO,
    Cluster,
)
from tests.system.conftest import make_tenant
from tests.system.prometheus import HarnessPrometheus, Sample

SCALED_OBJECTS = REPO / "deploy" / "k8s" / "components" / "keda" / "scaledobjects.yaml"
REQUESTS = 6
SCRAPES_S = 90.0  # a few of the shipped config's 15-s scrape and rule intervals
# Series the rules read that a healthy cluster under this traffic has: the gateway's
# requests, first tokens, loop lag, adapter loads, and the per-class demand.
EXPECTED = (
    "loraplex_inference_requests_total",
    "loraplex_ttft_seconds_bucket",
    "loraplex_event_loop_lag_seconds_bucket",
    "loraplex_adapter_loads_total",
    "loraplex_rank_class_in_flight",
    "loraplex_rank_class_waiting",
    "loraplex_rank_class_admitted_total",
    "loraplex_rank_class_shed_total",
    "loraplex_rank_class_ttft_seconds_bucket",
)


def _prometheus(cluster: Cluster, engine_hosts: tuple[str, ...]) -> Iterator[HarnessPrometheus]:
    """Prometheus on the data host scraping `engine_hosts`, for the test's duration."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed: `make prometheus` (deploy/local/prometheus.sh)")
    running = HarnessPrometheus(cluster, engine_hosts)
    try:
        running.start(API_HOSTS)
        yield running
    finally:
        running.stop()


@pytest.fixture
def prometheus(cluster: Cluster, engines: dict[str, str]) -> Iterator[HarnessPrometheus]:
    """Prometheus scraping the API hosts and the stand-in engine hosts."""
    yield from _prometheus(cluster, ENGINE_HOSTS)


@pytest.fixture
def prometheus_of_vllm(
    cluster: Cluster, real_engines: dict[str, str]
) -> Iterator[HarnessPrometheus]:
    """Prometheus scraping the API hosts and the two real vLLM hosts (the session's, which
    the real-engine drills use after this file)."""
    yield from _prometheus(cluster, REAL_ENGINE_HOSTS)


def _autoscaling_queries() -> dict[str, str]:
    """The keda component's queries, less the Kubernetes namespace the harness lacks."""
    queries = {}
    for scaled in yaml.safe_load_all(SCALED_OBJECTS.read_text()):
        for trigger in scaled["spec"]["triggers"]:
            query = trigger["metadata"]["query"].replace('namespace="loraplex", ', "")
            queries[f"{scaled['metadata']['name']}/{trigger['name']}"] = query
    return queries


def _value(samples: list[Sample]) -> float:
    return float(samples[0]["value"][1]) if samples else float("nan")


def test_prometheus_finds_what_the_rules_and_the_autoscaler_read(
    cluster: Cluster, prometheus: HarnessPrometheus, tmp_path: Path
) -> None:
    up = prometheus.wait_for(
        "up", SCRAPES_S, holds=lambda s: len(s) == 6 and all(_value([x]) == 1 for x in s)
    )
    assert sorted((s["metric"]["job"], _value([s])) for s in up) == [
        ("loraplex-agent", 1.0), ("loraplex-agent", 1.0),
        ("loraplex-api", 1.0), ("loraplex-api", 1.0),
        ("loraplex-engine", 1.0), ("loraplex-engine", 1.0),
    ], up  # fmt: skip

    tenant = make_tenant(cluster)
    (adapter,) = make_adapters(cluster, tenant, 1, tmp_path)
    for model in [FAKE_MODEL] * (REQUESTS - 1) + [adapter]:
        reply = ask(cluster, tenant, model)
        assert reply["status"] == 200, reply

    admitted = 'sum(loraplex_rank_class_admitted_total{rank_class="64"})'
    seen = prometheus.wait_for(admitted, SCRAPES_S, holds=lambda s: _value(s) >= REQUESTS)
    assert _value(seen) >= REQUESTS, seen
    for name in EXPECTED:
        assert prometheus.wait_for(name, SCRAPES_S), f"{name}: no series scraped"
    # The adapter was loaded through a node agent, which counts it and holds it in its cache.
    loads = 'sum(loraplex_agent_loads_total{result="ok"})'
    assert _value(prometheus.wait_for(loads, SCRAPES_S, holds=lambda s: _value(s) >= 1)) >= 1
    assert _value(prometheus.query("sum(loraplex_agent_cache_bytes)")) > 0

    for name, query in _autoscaling_queries().items():
        if 'rank_class="64"' not in query:
            continue  # the harness's engines are all of rank class 64
        samples = prometheus.wait_for(query, SCRAPES_S)
        assert len(samples) == 1 and _value(samples) >= 0, f"{name}: {query} -> {samples}"

    # The rules run: the recording rules answer, and no alert fires about a healthy cluster.
    demand = prometheus.wait_for('rank_class:loraplex_demand:sum{rank_class="64"}', SCRAPES_S)
    assert len(demand) == 1, demand
    # A ratio over 5 minutes needs requests that two scrapes apart saw: traffic goes on
    # until the rule has a number (an idle platform's is NaN, which fires nothing).
    deadline = time.monotonic() + SCRAPES_S
    errors = prometheus.query("loraplex:request_errors:ratio_rate5m")
    while math.isnan(_value(errors)) and time.monotonic() < deadline:
        assert ask(cluster, tenant, FAKE_MODEL)["status"] == 200
        time.sleep(1.0)
        errors = prometheus.query("loraplex:request_errors:ratio_rate5m")
    assert _value(errors) == 0, errors
    alerts = prometheus.query(
        'ALERTS{alertname=~"LoraplexAPIDown|LoraplexEngineDown|LoraplexAPINotScraped'
        '|LoraplexEnginesNotScraped|LoraplexErrorBudgetBurn"}'
    )
    assert alerts == [], alerts


def test_prometheus_scrapes_the_real_vllm_hosts_and_their_agents(
    prometheus_of_vllm: HarnessPrometheus,
) -> None:
    up = prometheus_of_vllm.wait_for(
        'up{job=~"loraplex-engine|loraplex-agent"}',
        SCRAPES_S,
        holds=lambda s: len(s) == 4 and all(_value([x]) == 1 for x in s),
    )
    assert sorted((s["metric"]["job"], _value([s])) for s in up) == [
        ("loraplex-agent", 1.0), ("loraplex-agent", 1.0),
        ("loraplex-engine", 1.0), ("loraplex-engine", 1.0),
    ], up  # fmt: skip
    # What the drain waits on (agent_drain.py) and the engines' dashboard row read.
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        samples = prometheus_of_vllm.wait_for(name, SCRAPES_S, holds=lambda s: len(s) == 2)
        assert len(samples) == 2, f"{name}: {samples}"
