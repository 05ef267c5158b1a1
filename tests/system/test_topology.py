"""The harness itself: every host reaches the data host, and both API hosts serve."""

from __future__ import annotations

from tests.system.cluster import API_HOSTS, Cluster
from tests.system.conftest import Tenant


def test_both_api_hosts_serve_a_tenant_from_the_client_host(
    cluster: Cluster, tenant: Tenant
) -> None:
    assert cluster.client is not None
    for host in API_HOSTS:
        reply = cluster.client.request(
            "GET", f"{cluster.api_url(host)}/v1/models", headers=tenant.headers
        )
        assert reply["status"] == 200, reply
        assert "loraplex-tiny-system" in reply["text"]
