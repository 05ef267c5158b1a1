"""A real engine host (vLLM's CPU server and its agent) killed while it streams an adapter.

The stand-in drills control each request's state exactly; this one checks the same promises
against the engine the product runs: streams past their first token end with an error
event, none hangs; a request for the adapter sent right after the kill is answered, by the
other host, which loads the adapter from the object store through its own agent; and the
answer is the same greedy text the dead host gave.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.support.hygiene import leaks
from tests.system import report
from tests.system.adapters import engine_name, held_by, make_adapters
from tests.system.cluster import REAL_MODEL, Cluster
from tests.system.conftest import in_rotation, make_tenant
from tests.system.drills import CHAT_PATH, wait_until
from tests.system.engine_streams import error_codes, is_error, outcome

STREAMS = 3
STREAM_LIMIT_S = 60.0  # every stream ends well within this (no hang)
QUESTION = [{"role": "user", "content": "Where do the rivers meet?"}]


def _greedy(cluster: Cluster, tenant_headers: dict[str, str], model: str) -> dict[str, Any]:
    assert cluster.client is not None
    body = {"model": model, "messages": QUESTION, "max_tokens": 12, "temperature": 0}
    url = cluster.api_url("api1") + CHAT_PATH
    return cluster.client.request("POST", url, headers=tenant_headers, json=body, timeout=120)


def _running(cluster: Cluster, host: str) -> float:
    """Requests the vLLM engine on `host` is running, from its own metrics."""
    assert cluster.client is not None
    reply = cluster.client.request("GET", f"{cluster.engine_url(host)}/metrics", timeout=2.0)
    for line in (reply.get("text") or "").splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _answer(reply: dict[str, Any]) -> str:
    return str(json.loads(reply["text"])["choices"][0]["message"]["content"])


def test_a_real_engine_host_killed_mid_stream_hands_its_adapter_to_the_other_host(
    cluster: Cluster, real_engines: dict[str, str], tmp_path: Path
) -> None:
    assert cluster.client is not None
    tenant = make_tenant(cluster)
    (adapter,) = make_adapters(cluster, tenant, 1, tmp_path, prefix="real", base=REAL_MODEL)
    before = _greedy(cluster, tenant.headers, adapter)
    assert before["status"] == 200, before
    name = engine_name(cluster, tenant, adapter)
    (holder,) = [h for h, e in real_engines.items() if name in held_by(cluster, e)]
    (other,) = [h for h in real_engines if h != holder]

    long_stream = {"model": adapter, "messages": QUESTION, "max_tokens": 2000, "stream": True}
    # Through api1, whose placement loaded the adapter: api2 may not have polled yet.
    streams = [
        cluster.client.stream(
            cluster.api_url("api1") + CHAT_PATH,
            headers=tenant.headers,
            json=long_stream,
            timeout=STREAM_LIMIT_S,
        )
        for _ in range(STREAMS)
    ]
    wait_until(lambda: _running(cluster, holder) >= STREAMS, 60, what="streaming")
    time.sleep(2.0)  # past their first tokens (checked below: each got several events)
    assert name not in held_by(cluster, real_engines[other])  # one copy, on the holder
    cluster.kill_engine_host(holder)
    killed_at = time.monotonic()
    after = _greedy(cluster, tenant.headers, adapter)  # the dead host is still in rotation
    answered_s = time.monotonic() - killed_at
    results = [f.result(STREAM_LIMIT_S) for f in streams]
    ended_s = time.monotonic() - killed_at
    left_s = wait_until(lambda: not in_rotation(cluster, real_engines[holder]), 30)

    assert [outcome(r) for r in results] == ["error event"] * STREAMS, results
    assert all(len(r["events"]) > 2 for r in results)  # they were past the first token
    errors = [e for r in results for e in r["events"] if is_error(e)]
    assert not [leaks(e) for e in errors if leaks(e)], errors
    assert after["status"] == 200, after
    assert _answer(after) == _answer(before)  # the same adapter, the same greedy answer
    assert name in held_by(cluster, real_engines[other])
    cluster.kill_engine_host(other)  # the real engines' part is done: free the two cores
    report.record(
        "real engine host (vLLM CPU + agent) killed mid-stream",
        f"{STREAMS} streams past 1st token -> error event "
        f"{sorted({c for r in results for c in error_codes(r)})}, all ended {ended_s:.1f}s "
        f"after the kill; the adapter asked right after -> 200 in {answered_s:.1f}s from "
        f"{other}, same greedy text",
        f"the adapter loaded on {other} from S3 through its agent",
        f"left rotation {left_s:.1f}s after the streams ended",
    )
