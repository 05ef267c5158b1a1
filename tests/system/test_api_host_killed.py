"""An API host killed (SIGKILL) with a stream in flight: the other host keeps serving, and
the concurrency lease the dead host held frees within the lease time."""

from __future__ import annotations

from typing import Any

from tests.system import report
from tests.system.cluster import FAKE_MODEL, Cluster
from tests.system.conftest import make_tenant, usage_totals
from tests.system.drills import CHAT_PATH, error_code, wait_until
from tests.system.engine_streams import tokens_received

SLOW_STREAM = "tokens=200 every=0.05"  # 10 s: in flight when its API host dies
SLACK_S = 5.0  # renewal period and polling on a loaded 2-core host


def _chat(content: str, stream: bool) -> dict[str, Any]:
    return {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 200,
        "stream": stream,
    }


def test_api_host_killed_frees_its_concurrency_lease_within_the_lease_time(
    cluster: Cluster, engines: dict[str, str]
) -> None:
    client = cluster.client
    assert client is not None
    one_slot = make_tenant(cluster, overrides={"concurrent_requests": 1})
    lease_s = cluster.settings("api1").concurrency_lease_s

    def on_api2() -> dict[str, Any]:
        url = cluster.api_url("api2") + CHAT_PATH
        body = _chat("tokens=2", stream=False)
        return client.request("POST", url, headers=one_slot.headers, json=body, timeout=30)

    doomed = client.stream(
        cluster.api_url("api1") + CHAT_PATH,
        headers=one_slot.headers,
        json=_chat(SLOW_STREAM, stream=True),
    )
    wait_until(lambda: sum(cluster.engine_stats(h).get("streaming", 0) for h in engines) >= 1, 20)
    refused = on_api2()  # the one slot is held by api1's stream, and api2 knows it
    assert refused["status"] == 429, refused
    cluster.services["api1"].kill()
    try:
        cut = doomed.result(30)
        freed_s = wait_until(lambda: on_api2()["status"] == 200, lease_s + SLACK_S, every_s=0.25)
    finally:
        cluster.restart_api("api1")
    assert cut.get("error") or cut.get("status") is None or cut["events"][-1:] != ["[DONE]"]
    # What PostgreSQL holds: api2's request once its flush ran; the cut stream's usage was
    # in the dead process's memory (flushed every few seconds, and only when a pump ends).
    wait_until(lambda: usage_totals(cluster, one_slot, "api2")["requests"] >= 1, 20, 0.5)
    stored = usage_totals(cluster, one_slot, "api2")
    report.record(
        "API host killed (SIGKILL) with a stream in flight",
        f"api2 refused the tenant's 2nd request: 429 {error_code(refused)}; "
        f"then served it; the cut stream: {cut.get('error') or 'ended'}",
        f"usage: {stored['requests']} request(s), {stored['cut_streams']} cut stream(s) "
        f"recorded; lost: the cut stream's {tokens_received(cut)} tokens the client had "
        "received (bound: the dead host's streams in flight + its last 5 s of usage)",
        f"lease freed {freed_s:.1f}s after kill (lease {lease_s:.0f}s)",
    )
