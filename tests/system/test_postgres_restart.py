"""PostgreSQL restarted under two API hosts: 503 (never 500) while it is down, no row half
written, and both hosts recover by themselves."""

from __future__ import annotations

import secrets

from tests.system import report
from tests.system.cluster import API_HOSTS, Cluster
from tests.system.conftest import BASE, Tenant
from tests.system.drills import assert_clean_error, summary, wait_until

RECOVERY_LIMIT_S = 30.0


def test_postgres_down_answers_503_and_recovers_without_restarting_an_api(
    cluster: Cluster, tenant: Tenant
) -> None:
    client = cluster.client
    assert client is not None
    pids = {host: cluster.services[host].pid for host in API_HOSTS}
    adapters = f"/api/v1/tenants/{tenant.id}/adapters"
    doomed = f"during-outage-{secrets.token_hex(3)}"
    cluster.stop_postgres()
    try:
        replies = [
            client.request(method, cluster.api_url(host) + path, headers=tenant.headers, json=body)
            for host in API_HOSTS
            for method, path, body in (
                ("GET", "/v1/models", None),
                ("GET", adapters, None),
                ("POST", adapters, {"name": doomed, "base_model": BASE}),
            )
        ]
    finally:
        cluster.start_postgres()
    for reply in replies:
        assert reply["status"] == 503, reply
        assert "retry-after" in reply["headers"], reply
        assert_clean_error(reply)

    def all_hosts_answer() -> bool:
        return all(
            client.request("GET", cluster.api_url(h) + "/v1/models", headers=tenant.headers)[
                "status"
            ]
            == 200
            for h in API_HOSTS
        )

    recovery_s = wait_until(all_hosts_answer, RECOVERY_LIMIT_S)
    assert {host: cluster.services[host].pid for host in API_HOSTS} == pids
    assert all(cluster.services[host].is_running for host in API_HOSTS)
    listed = client.request("GET", cluster.api_url("api1") + adapters, headers=tenant.headers)
    assert listed["status"] == 200 and doomed not in listed["text"]  # nothing half written
    report.record(
        "PostgreSQL restarted (fast shutdown)",
        summary(replies),
        "adapter POSTed during outage: absent",
        f"{recovery_s:.2f}s after PG ready, no API restart",
    )
