"""Redis restarted under two API hosts: api1 fails closed, api2 fails open (settings
`LORAPLEX_RATELIMIT_FAIL_MODE`), the control plane keeps serving, and admission recovers
by itself when Redis is back; a resumable stream in flight ends cleanly."""

from __future__ import annotations

import json

from tests.support.hygiene import leaks
from tests.system import report
from tests.system.cluster import API_HOSTS, Cluster
from tests.system.conftest import API_MODES, BASE, Tenant, make_tenant
from tests.system.drills import CHAT_PATH, assert_clean_error, error_code, summary, wait_until
from tests.system.engine_streams import (
    PAST_FIRST_TOKEN,
    chat,
    error_codes,
    outcome,
    tokens_received,
)

RECOVERY_LIMIT_S = 30.0
STREAM_LIMIT_S = 30.0
CHAT = {"model": BASE, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_redis_down_follows_each_hosts_fail_mode_and_recovers(
    cluster: Cluster, tenant: Tenant
) -> None:
    client = cluster.client
    assert client is not None
    assert API_MODES == {"api1": "closed", "api2": "open"}
    pids = {host: cluster.services[host].pid for host in API_HOSTS}

    def chat(host: str) -> dict:
        url = cluster.api_url(host) + CHAT_PATH
        return client.request("POST", url, headers=tenant.headers, json=CHAT, timeout=30)

    cluster.stop_redis()
    try:
        refused, admitted = chat("api1"), chat("api2")
        control = [
            client.request("GET", cluster.api_url(h) + "/v1/models", headers=tenant.headers)
            for h in API_HOSTS
        ]
    finally:
        cluster.start_redis()
    # Fail closed: a clean 503 the client may retry.
    assert refused["status"] == 503, refused
    assert error_code(refused) == "rate_limiter_unavailable"
    assert int(refused["headers"]["retry-after"]) > 0
    assert_clean_error(refused)
    # Fail open: admitted without limits; with no engine for the model that is the
    # no-engine answer, never a 500.
    assert admitted["status"] != 500 and error_code(admitted) != "rate_limiter_unavailable"
    assert_clean_error(admitted)
    assert [reply["status"] for reply in control] == [200, 200]

    recovery_s = wait_until(lambda: error_code(chat("api1")) != "rate_limiter_unavailable", 30)
    assert error_code(chat("api2")) != "rate_limiter_unavailable"
    assert {host: cluster.services[host].pid for host in API_HOSTS} == pids
    report.record(
        "Redis restarted",
        f"closed: {summary([refused])}; open: {summary([admitted])}; /v1/models 200",
        "(limits are in Redis: a restart forgets counters)",
        f"{recovery_s:.2f}s after Redis ready, no API restart",
    )


# Found by this drill: a resumable stream is read back from Redis (gateway/resume.py), and
# when Redis goes away the reader's error escapes the response, so the client's connection
# is cut with no error event. The drill stays strict: it passes once the stream ends cleanly.
def test_redis_down_under_a_resumable_stream_ends_it_cleanly(
    cluster: Cluster, engines: dict[str, str]
) -> None:
    client = cluster.client
    assert client is not None
    tenant = make_tenant(cluster)
    body = {
        **chat(PAST_FIRST_TOKEN),
        "stream_options": {"resumable": True, "include_usage": True},
    }
    flight = client.stream(cluster.api_url("api1") + CHAT_PATH, headers=tenant.headers, json=body)
    wait_until(lambda: sum(cluster.engine_stats(h).get("streaming", 0) for h in engines) >= 1, 20)
    cluster.stop_redis()
    try:
        result = flight.result(STREAM_LIMIT_S)  # it ends: no hang
    finally:
        cluster.start_redis()
    report.record(
        "Redis stopped under a resumable stream",
        f"the stream: {outcome(result)} {error_codes(result)}, "
        f"{tokens_received(result)} tokens, ended in {result['elapsed_s']:.1f}s",
        "-",
        "Redis restarted",
    )
    assert result["status"] == 200, result
    assert outcome(result) in ("completed", "error event"), outcome(result)
    assert not leaks(json.dumps(result["events"])), result["events"]
