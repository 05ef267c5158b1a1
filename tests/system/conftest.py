"""The multi-host harness: one topology of namespaces for the whole folder.

Skipped, with the reason, where namespaces cannot be made (not root, no iproute2, no
permission). The topology is torn down at the end even after a failure: the fixture's
`finally`, and the network's atexit guard if the session itself dies.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from loraplex.adapters.facts import facts_to_json, read_base_model_facts
from loraplex.serving.engines.launcher import ensure_model, ensure_venv
from tests.support.netns import leftovers, why_unavailable
from tests.support.tenants import Tenant
from tests.system import report
from tests.system.cluster import (
    API_HOSTS,
    ENGINE_HOSTS,
    FAKE_MODEL,
    REAL_ENGINE_HOSTS,
    REAL_MODEL,
    REPO,
    Cluster,
    build_cluster,
    close_cluster,
)
from tests.system.drills import wait_until

# api1 refuses when Redis is unreachable (the default), api2 admits without limits.
API_MODES = {"api1": "closed", "api2": "open"}
BASE = "loraplex-tiny-system"  # a base model no engine serves
MODEL_DIR = REPO / "var" / "models" / "loraplex-tiny"


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """Data host (PostgreSQL, Redis, S3), two API hosts and a client host, all running."""
    reason = why_unavailable()
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    ensure_model(MODEL_DIR, say=lambda _: None)  # its tokenizer counts prompts; adapters fit it
    built = build_cluster(API_MODES)
    print(f"\n[system] topology up in {time.monotonic() - started:.1f}s ({built.workdir})")
    try:
        yield built
    finally:
        close_cluster(built, keep_logs=bool(os.environ.get("LORAPLEX_SYSTEM_KEEP_LOGS")))
        left = leftovers(built.network.prefix)
        assert not left, f"the topology left these behind: {left}"
        if report.table():
            print(f"\n[system] drills\n{report.table()}")


def _ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply.get("status") in (200, 201), reply
    return dict(json.loads(reply["text"]))


def _operator(
    cluster: Cluster, method: str, path: str, body: Any = None, host: str = "api1"
) -> dict[str, Any]:
    """An operator request to `host`'s API from the client host."""
    assert cluster.client is not None
    return cluster.client.request(
        method,
        cluster.api_url(host) + path,
        headers={"Authorization": f"Bearer {cluster.operator_key}"},
        json=body,
    )


def register_base(cluster: Cluster, name: str) -> None:
    """Register the tiny model's facts (its tokenizer counts prompts) under `name`."""
    facts = {**facts_to_json(read_base_model_facts(MODEL_DIR, name)), "source": str(MODEL_DIR)}
    reply = _operator(cluster, "POST", "/api/v1/base-models", facts)
    assert reply["status"] in (201, 409), reply


def make_tenant(cluster: Cluster, overrides: dict[str, int] | None = None) -> Tenant:
    """A new tenant with an admin + inference key, and quota `overrides` if given."""
    slug = f"sys-{secrets.token_hex(3)}"
    body = {"slug": slug, "name": slug, "plan": "pro"}
    made = _ok(_operator(cluster, "POST", "/api/v1/tenants", body))
    tenant = f"/api/v1/tenants/{made['id']}"
    key_body = {"name": "sys", "scopes": ["admin", "inference"]}
    key = _ok(_operator(cluster, "POST", f"{tenant}/api-keys", key_body))["key"]
    if overrides:
        _ok(_operator(cluster, "PUT", f"{tenant}/quota", {"overrides": overrides}))
    return Tenant(made["id"], key)


def in_rotation(cluster: Cluster, engine_id: str, host: str = "api1") -> bool:
    """Whether the API on `host` has the engine in its rotation."""
    reply = _operator(cluster, "GET", f"/api/v1/engines/{engine_id}", host=host)
    live = json.loads(reply["text"]).get("live") if reply.get("status") == 200 else None
    return bool(live and live.get("in_rotation"))


@pytest.fixture(scope="session")
def tenant(cluster: Cluster) -> Tenant:
    """A tenant with a key, and the base model it may call (no engine serves it)."""
    register_base(cluster, BASE)
    return make_tenant(cluster)


def in_rotation_everywhere(cluster: Cluster, hosts: tuple[str, ...]) -> dict[str, str]:
    """Wait until the engines the agents on `hosts` registered are in rotation on both API
    hosts; engine host -> its API id."""
    listed = _ok(_operator(cluster, "GET", "/api/v1/engines?limit=500"))
    ids = {e["name"]: e["id"] for e in listed["items"] if e["name"] in hosts}
    assert sorted(ids) == sorted(hosts), listed
    for engine_id in ids.values():
        for host in API_HOSTS:
            wait_until(lambda e=engine_id, h=host: in_rotation(cluster, e, h), 60)  # type: ignore[misc]
    return ids


@pytest.fixture(scope="session")
def engine_hosts(cluster: Cluster) -> dict[str, str]:
    """The two engine hosts, each registered by its own agent and in rotation on both API
    hosts; engine host -> its API id."""
    register_base(cluster, FAKE_MODEL)
    for host in ENGINE_HOSTS:
        cluster.start_engine_host(host)
    return in_rotation_everywhere(cluster, ENGINE_HOSTS)


@pytest.fixture
def engines(cluster: Cluster, engine_hosts: dict[str, str]) -> dict[str, str]:
    """`engine_hosts`, once the drill before has settled: an engine it restarted has had
    what it held loaded again (placement restores it a moment after the engine is back in
    rotation, evicting by value, which may take the next drill's freshly loaded adapter)."""
    wait_until(lambda: quiet(cluster), 60, what="placement settled")
    return engine_hosts


def quiet(cluster: Cluster, hold_s: float = 1.0) -> bool:
    """Whether no API host's placement loads an adapter or has requests waiting for one,
    now and again after `hold_s` (an agent's restart report lands a moment later)."""
    for attempt in range(2):
        if attempt:
            time.sleep(hold_s)
        for host in API_HOSTS:
            engines = _ok(_operator(cluster, "GET", "/api/v1/placement", host=host))["engines"]
            if any(e["loading"] or e["waiting"] for e in engines):
                return False
    return True


@pytest.fixture(scope="session")
def real_engines(cluster: Cluster) -> dict[str, str]:
    """Two hosts running vLLM's CPU server on the development model, each registered by its
    agent and in rotation on both API hosts; engine host -> its API id."""
    register_base(cluster, REAL_MODEL)
    ensure_venv(cluster.real_engine_config(REAL_ENGINE_HOSTS[0]), say=print)
    started = time.monotonic()
    for host in REAL_ENGINE_HOSTS:  # side by side: each takes about half a minute alone
        cluster.start_real_engine(host)
    for host in REAL_ENGINE_HOSTS:
        cluster.wait_for_real_engine(host)
        cluster.start_agent(host, kind="vllm", base_model=REAL_MODEL)
    print(f"\n[system] two vLLM engine hosts up in {time.monotonic() - started:.1f}s")
    return in_rotation_everywhere(cluster, REAL_ENGINE_HOSTS)


def usage_totals(cluster: Cluster, tenant: Tenant, host: str = "api1") -> dict[str, int]:
    """The tenant's usage totals as stored in PostgreSQL (last 24 hours)."""
    assert cluster.client is not None
    reply = cluster.client.request(
        "GET", f"{cluster.api_url(host)}/api/v1/tenants/{tenant.id}/usage", headers=tenant.headers
    )
    return dict(_ok(reply)["totals"])
