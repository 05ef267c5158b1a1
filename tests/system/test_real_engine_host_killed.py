"""A real engine host (vLLM's CPU server and its agent) killed while it streams an adapter.

The stand-in drills control each request's state exactly; this one checks the same promises
against the engine the product runs: greedy streams cut by the host's death are continued on
the other host (which loads the adapter from the object store through its own agent) and
read as the uninterrupted answer, billed once; none hangs; a request for the adapter sent
right after the kill is answered by the other host with the same greedy text the dead host
gave. (A stream failover cannot continue is not in this drill: here the kill comes before its
first text, and such a stream is then started again elsewhere or meets its first-token
timeout, by the adapter's load time; the stand-in drills and tests/integration/gateway cover it.)
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

from tests.support.failover_api import failovers
from tests.support.hygiene import leaks
from tests.system import report
from tests.system.adapters import engine_name, held_by, make_adapters
from tests.system.cluster import METRICS_TOKEN, REAL_MODEL, Cluster
from tests.system.conftest import in_rotation, make_tenant
from tests.system.drills import CHAT_PATH, wait_until
from tests.system.engine_streams import is_error, outcome, text

STREAMS = 3  # greedy: continued on the other host
ANSWER_TOKENS = 1500  # long enough to be mid-answer when the host dies (400 were not)
STREAM_LIMIT_S = 60.0  # every stream ends well within this (no hang)
QUESTION = [{"role": "user", "content": "Where do the rivers meet?"}]


def _greedy(
    cluster: Cluster, tenant_headers: dict[str, str], model: str, tokens: int = 12
) -> dict[str, Any]:
    assert cluster.client is not None
    body = {"model": model, "messages": QUESTION, "max_tokens": tokens, "temperature": 0}
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


def _failovers(cluster: Cluster, outcome: str) -> float:
    """api1's count of failovers with `outcome`."""
    assert cluster.client is not None
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    url = cluster.api_url("api1") + "/metrics"
    return failovers(
        cluster.client.request("GET", url, headers=headers, timeout=10)["text"], outcome
    )


def _billed(result: dict[str, Any]) -> int:
    """The completion tokens the stream's usage chunk bills."""
    (usage,) = [
        u for e in result["events"] if e.startswith("{") if (u := json.loads(e).get("usage"))
    ]
    return int(usage["completion_tokens"])


def _longest_gap_s(result: dict[str, Any]) -> float:
    """The longest pause between two events the client read."""
    arrived: list[float] = result["arrived_s"]
    return max(b - a for a, b in itertools.pairwise(arrived))


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

    greedy_stream = {
        "model": adapter, "messages": QUESTION, "max_tokens": ANSWER_TOKENS, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    whole = _greedy(cluster, tenant.headers, adapter, ANSWER_TOKENS)  # the uninterrupted answer
    assert whole["status"] == 200, whole
    whole_tokens = json.loads(whole["text"])["usage"]["completion_tokens"]
    assert whole_tokens == ANSWER_TOKENS, "the answer ends before the kill could cut it"
    continued = _failovers(cluster, "continued")
    # Through api1, whose placement loaded the adapter: api2 may not have polled yet.
    streams = [
        cluster.client.stream(
            cluster.api_url("api1") + CHAT_PATH,
            headers=tenant.headers,
            json=body,
            timeout=STREAM_LIMIT_S,
        )
        for body in [greedy_stream] * STREAMS
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

    assert [outcome(r) for r in results] == ["completed"] * STREAMS, results
    assert [text(r) for r in results] == [_answer(whole)] * STREAMS  # no gap, no repeat
    assert [_billed(r) for r in results] == [whole_tokens] * STREAMS  # each token once
    assert _failovers(cluster, "continued") == continued + STREAMS  # not ended before the kill
    assert not [leaks(e) for r in results for e in r["events"] if is_error(e) and leaks(e)]
    assert after["status"] == 200, after
    assert _answer(after) == _answer(before)  # the same adapter, the same greedy answer
    assert name in held_by(cluster, real_engines[other])
    cluster.kill_engine_host(other)  # the real engines' part is done: free the two cores
    report.record(
        "real engine host (vLLM CPU + agent) killed mid-stream",
        f"{STREAMS} greedy streams -> continued on {other}, the uninterrupted "
        f"text, longest gap {max(map(_longest_gap_s, results)):.2f}s, tokens billed "
        f"{[_billed(r) for r in results]} = received {whole_tokens} each; all ended {ended_s:.1f}s after the kill; "
        f"the adapter asked right after -> 200 in {answered_s:.1f}s, same greedy text",
        f"the adapter loaded on {other} from S3 through its agent",
        f"left rotation {left_s:.1f}s after the streams ended",
    )
