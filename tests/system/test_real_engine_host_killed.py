"""A real engine host (vLLM's CPU server and its agent) killed while it streams an adapter.

The stand-in drills control each request's state exactly; this one checks the same promises
against the engine the product runs: greedy streams cut by the host's death are continued on
the other host (which loads the adapter from the object store through its own agent) and
read as the uninterrupted answer, billed once; none hangs; a request for the adapter sent
right after the kill is answered by the other host with the same greedy text the dead host
gave. The host dies once its engine has generated about a fifth of each answer, by its own
count. (A stream failover cannot continue is not in this drill: the stand-in drills and
tests/integration/gateway cover it.)
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

from tests.support.failover_api import LEFT_AFTER, failovers
from tests.support.hygiene import leaks
from tests.system import report
from tests.system.adapters import engine_name, held_by, make_adapters
from tests.system.cluster import METRICS_TOKEN, REAL_MODEL, Cluster
from tests.system.conftest import in_rotation, make_tenant
from tests.system.drills import CHAT_PATH, wait_until
from tests.system.engine_streams import is_error, outcome, text

STREAMS = 3  # greedy: continued on the other host
ANSWER_TOKENS = 1500  # long enough to be mid-answer when the host dies (400 were not)
CUT_TOKENS = 300  # the host dies once each stream has about this many tokens, by its count
STREAM_LIMIT_S = 60.0  # every stream ends well within this (no hang)
# A question whose greedy answer puts out text all along (test_vllm_failover.py): the
# continuation starts after the last token whose text the client had.
QUESTION = [{"role": "user", "content": "Tell me a story"}]


def _greedy(
    cluster: Cluster, tenant_headers: dict[str, str], model: str, tokens: int = 12
) -> dict[str, Any]:
    assert cluster.client is not None
    body = {"model": model, "messages": QUESTION, "max_tokens": tokens, "temperature": 0}
    url = cluster.api_url("api1") + CHAT_PATH
    return cluster.client.request("POST", url, headers=tenant_headers, json=body, timeout=120)


def _metric(cluster: Cluster, host: str, name: str) -> float:
    """A series of the vLLM engine on `host`, summed over its labels, from its own metrics."""
    assert cluster.client is not None
    reply = cluster.client.request("GET", f"{cluster.engine_url(host)}/metrics", timeout=2.0)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in (reply.get("text") or "").splitlines()
        if line.startswith(name)
    )


def _running(cluster: Cluster, host: str) -> float:
    """Requests the vLLM engine on `host` is running."""
    return _metric(cluster, host, "vllm:num_requests_running")


def _generated(cluster: Cluster, host: str) -> float:
    """Tokens the vLLM engine on `host` has generated since it started."""
    return _metric(cluster, host, "vllm:generation_tokens_total")


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
    generated = _generated(cluster, holder)
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
    # Mid-answer by the engine's own count (a fixed sleep once cut before any text).
    seen = [0.0]

    def mid_answer() -> bool:
        seen.append(_generated(cluster, holder) - generated)
        return seen[-1] >= STREAMS * CUT_TOKENS

    wait_until(mid_answer, 60, every_s=0.05, what=f"{CUT_TOKENS} tokens a stream")
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
    api_log = cluster.network.log_dir / f"{cluster.network.prefix}-api1-api.log"
    had = [int(m[1]) for m in LEFT_AFTER.finditer(api_log.read_text(errors="replace"))]
    cluster.kill_engine_host(other)  # the real engines' part is done: free the two cores
    report.record(
        "real engine host (vLLM CPU + agent) killed mid-stream",
        f"{STREAMS} greedy streams of {ANSWER_TOKENS} tokens, the host killed once its engine "
        f"had generated {seen[-1]:.0f} -> continued on {other} after {had[-STREAMS:]} tokens "
        f"(the API's count), the uninterrupted "
        f"text, longest gap {max(map(_longest_gap_s, results)):.2f}s, tokens billed "
        f"{[_billed(r) for r in results]} = received {whole_tokens} each; all ended {ended_s:.1f}s after the kill; "
        f"the adapter asked right after -> 200 in {answered_s:.1f}s, same greedy text",
        f"the adapter loaded on {other} from S3 through its agent",
        f"left rotation {left_s:.1f}s after the streams ended",
    )
