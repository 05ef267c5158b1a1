"""A rolling restart of both engine hosts under steady streaming load, drained first.

Each host in turn is drained the way a pod's preStop hook drains it (`POST
http://127.0.0.1:8200/drain` from the engine host itself), then its engine gets SIGTERM and
starts again; the next host goes once this one is back in rotation on both API hosts.
Meanwhile streams run through both API hosts the whole time. A user notices nothing: no
request fails and no stream is cut. engine1 is the rank-16 class and engine2 the rank-64
one, so while engine1 is out its rank-8 adapters are served by the larger class (spill).

With streams longer than the pod's grace period (the drain may wait that long, then the
engine is killed), the drain moves them to the other engine (docs/failover.md, *Drain*): it
answers drained within the grace and every stream completes with the uninterrupted answer.

The control experiment kills an engine (SIGKILL, no drain) under the same load: streams are
cut, so the drill's zero is a measurement, not a blind spot. The last drill rolls the two
real vLLM CPU hosts the same way (one rank class: the other host serves while one is out).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tests.system import report
from tests.system.adapters import answered_by, ask, make_adapters
from tests.system.cluster import AGENT_PORT, API_HOSTS, REAL_ENGINE_HOSTS, REAL_MODEL, Cluster
from tests.system.conftest import Tenant, in_rotation, make_tenant
from tests.system.drills import CHAT_PATH, wait_until
from tests.system.engine_streams import chat, outcome, text
from tests.system.rolling_load import SteadyLoad, Stream

ROLL = ("engine1", "engine2")
SMALL_CLASS, LARGE_CLASS = 16, 64  # engine1's rank class for this drill, and engine2's
PRE_STOP = (  # what the pod's preStop hook runs in the engine container
    "import urllib.request as u;"
    "print(u.urlopen(u.Request('http://127.0.0.1:{port}/drain{query}',method='POST'),"
    "timeout=700).read().decode())"
)
# The long-stream drill: answers longer than the pod's grace period (the drain may wait
# GRACE_S, then the engine is killed), which only moving them to the other engine completes.
GRACE_S = 3.0
LONG_TOKENS = 160
LONG = f"greedy tokens={LONG_TOKENS} every=0.05"  # 8 s of tokens


def drain(cluster: Cluster, host: str, wait_s: float | None = None) -> dict[str, Any]:
    """Run the preStop hook's call on `host` (waiting at most `wait_s`); the agent's answer."""
    query = "" if wait_s is None else f"?wait_s={wait_s}"
    done = subprocess.run(
        ["ip", "netns", "exec", cluster.network.hosts[host].namespace,
         "python3", "-c", PRE_STOP.format(port=AGENT_PORT, query=query)],
        capture_output=True, text=True, timeout=720, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout))


def agent_sees(cluster: Cluster, host: str) -> dict[str, Any]:
    """The agent's /readyz: what it last told the API about its engine."""
    assert cluster.client is not None
    ip = cluster.network.hosts[host].ip
    reply = cluster.client.request("GET", f"http://{ip}:{AGENT_PORT}/readyz", timeout=2.0)
    return dict(json.loads(reply["text"])) if reply.get("status") in (200, 503) else {}


def everywhere(cluster: Cluster, engine_id: str) -> bool:
    """In rotation on both API hosts."""
    return all(in_rotation(cluster, engine_id, api) for api in API_HOSTS)


def restart_agent(cluster: Cluster, host: str, rank: int, engine_id: str) -> None:
    """Start `host`'s agent again with another rank class (SIGKILL: the row is kept)."""
    cluster.services[f"{host}-agent"].kill()
    cluster.start_agent(host, max_lora_rank=rank)
    wait_until(lambda: everywhere(cluster, engine_id), 60, what="back in rotation")


def roll(
    cluster: Cluster,
    host: str,
    engine_id: str,
    start: Callable[[str], object] | None = None,
    grace_s: float | None = None,
) -> dict[str, Any]:
    """Drain, SIGTERM and restart `host`'s engine (the stand-in unless `start` says
    otherwise); back in rotation on both API hosts. With `grace_s`, the pod's grace period:
    the drain waits that long at most, then the engine is killed (what SIGKILL at the end
    of the grace does to streams still running)."""
    out_at = time.monotonic()
    answer = drain(cluster, host, grace_s)
    drained_at = time.monotonic()
    assert not any(in_rotation(cluster, engine_id, api) for api in API_HOSTS)
    if grace_s is None:
        cluster.services[host].stop(grace_s=60)  # SIGTERM: it finishes what it has, then exits
    else:
        cluster.services[host].kill()
    wait_until(lambda: agent_sees(cluster, host).get("engine_up") is False, 30, what="seen down")
    (start or cluster.start_fake_engine)(host)
    wait_until(lambda: everywhere(cluster, engine_id), 60, what="back in rotation")
    back_at = time.monotonic()
    return {**answer, "out_at": out_at, "back_at": back_at, "drain_s": drained_at - out_at}


def during(streams: list[Stream], start: float, end: float) -> list[Stream]:
    """Streams that started within [start, end]."""
    return [s for s in streams if start <= s.started <= end]


def table(rows: list[tuple[str, str]]) -> str:
    """Two columns, aligned."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def test_a_drained_rolling_restart_fails_no_request_and_cuts_no_stream(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    restart_agent(cluster, "engine1", SMALL_CLASS, engines["engine1"])
    tenant = make_tenant(cluster)
    adapters = make_adapters(cluster, tenant, 3, tmp_path, prefix="roll")
    for adapter in adapters:  # placed in the smallest class that fits: engine1's
        assert ask(cluster, tenant, adapter)["status"] == 200
    load = SteadyLoad(cluster, tenant, adapters)
    load.start()
    try:
        time.sleep(3.0)  # the load is steady before the first drain
        rolled = {host: roll(cluster, host, engines[host]) for host in ROLL}
        time.sleep(3.0)  # and after the last host is back
    finally:
        streams = load.stop()
        restart_agent(cluster, "engine1", LARGE_CLASS, engines["engine1"])

    roll_start, roll_end = rolled["engine1"]["out_at"], rolled["engine2"]["back_at"]
    in_roll = during(streams, roll_start, roll_end)
    failed = [s for s in streams if s.failed]
    cut = [s for s in streams if s.cut]
    small_out = during(streams, rolled["engine1"]["out_at"], rolled["engine1"]["back_at"])
    spilled = [s for s in small_out if s.engines == {"engine2"}]
    large_out = during(streams, rolled["engine2"]["out_at"], rolled["engine2"]["back_at"])
    on_small = [s for s in large_out if s.engines == {"engine1"}]
    longest_ttft = max((s.ttft_s or 0.0 for s in in_roll), default=0.0)
    figures = [
        ("requests (streams)", f"{len(streams)}, {len(in_roll)} during the roll"),
        ("failed", str(len(failed))),
        ("cut streams", str(len(cut))),
        ("longest TTFT during the roll", f"{longest_ttft:.2f} s"),
        ("spill: rank-16 class empty", f"{len(spilled)}/{len(small_out)} served by rank-64"),
        ("rank-64 class empty", f"{len(on_small)}/{len(large_out)} served by rank-16"),
    ]
    for host, r in rolled.items():
        out_s = r["back_at"] - r["out_at"]
        figures.append((f"{host}", f"drain {r['drain_s']:.1f} s (drained={r['drained']}), "
                                   f"out of rotation {out_s:.1f} s"))  # fmt: skip
    print(f"\n[rolling restart, stand-in engines]\n{table(figures)}")
    report.record(
        "rolling restart, drained (stand-ins, rank 16 + 64)",
        f"{len(streams)} streams via both APIs: {len(failed)} failed, {len(cut)} cut; "
        f"longest TTFT in roll {longest_ttft:.2f}s",
        f"spill: {len(spilled)}/{len(small_out)} rank-8 streams on rank-64 while rank-16 empty",
        "; ".join(f"{h} out {r['back_at'] - r['out_at']:.1f}s" for h, r in rolled.items()),
    )

    assert all(r["drained"] for r in rolled.values()), rolled
    assert not failed, [(s.api, s.outcome) for s in failed]
    assert not cut
    # Once the drain answered, the rank-16 class was empty: its adapters went to rank 64.
    drained_at = rolled["engine1"]["out_at"] + rolled["engine1"]["drain_s"]
    after_drain = [s for s in small_out if s.started > drained_at]
    assert after_drain and all(s.engines == {"engine2"} for s in after_drain), after_drain


def streaming(cluster: Cluster) -> int:
    """Streams the rolled hosts' stand-in engines are sending now."""
    return sum(cluster.engine_stats(host).get("streaming", 0) for host in ROLL)


def long_stream(cluster: Cluster, tenant: Tenant, adapter: str, api: str) -> Future[dict[str, Any]]:
    """A greedy `LONG` stream of `adapter` through `api`."""
    assert cluster.client is not None
    body = {**chat(LONG, adapter), "max_tokens": LONG_TOKENS, "temperature": 0}
    url = cluster.api_url(api) + CHAT_PATH
    return cluster.client.stream(url, headers=tenant.headers, json=body, timeout=120)


def test_a_rolling_restart_with_streams_longer_than_the_grace_completes_them(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    tenant = make_tenant(cluster)
    (adapter,) = make_adapters(cluster, tenant, 1, tmp_path, prefix="long")
    started = time.monotonic()
    alone = long_stream(cluster, tenant, adapter, API_HOSTS[0]).result(120)
    uninterrupted_s = time.monotonic() - started
    assert outcome(alone) == "completed" and uninterrupted_s > 2 * GRACE_S  # longer than it
    results, rolled, on_host = [], {}, {}
    for host in ROLL:
        streams = [long_stream(cluster, tenant, adapter, api) for api in API_HOSTS * 2]
        # Placement may keep the adapter's streams on one engine: they are all in flight
        # somewhere, and the drained host's share is counted.
        count = len(streams)
        wait_until(lambda n=count: streaming(cluster) == n, 30, what="the long streams in flight")  # type: ignore[misc]
        on_host[host] = cluster.engine_stats(host).get("streaming", 0)
        rolled[host] = roll(cluster, host, engines[host], grace_s=GRACE_S)
        results += [f.result(120) for f in streams]
    completed = [r for r in results if outcome(r) == "completed" and text(r) == text(alone)]
    longest_drain = max(r["drain_s"] for r in rolled.values())
    report.record(
        f"rolling restart, streams of {uninterrupted_s:.0f}s > grace {GRACE_S:.0f}s (stand-ins)",
        f"{len(completed)}/{len(results)} streams complete ({sum(on_host.values())} on the"
        " drained hosts), text = the uninterrupted answer",
        "-",
        f"longest drain {longest_drain:.1f}s (drained={all(r['drained'] for r in rolled.values())})",
    )
    print(f"\n[long streams] {uninterrupted_s:.1f}s uninterrupted; on the drained host: {on_host}; "
          + "; ".join(f"{h} drain {r['drain_s']:.1f}s" for h, r in rolled.items()))  # fmt: skip
    assert sum(on_host.values()) >= 1, "no stream ran on a drained host"
    assert all(r["drained"] for r in rolled.values()), rolled  # nothing left for the kill
    assert len(completed) == len(results), [outcome(r) for r in results]


def test_without_a_drain_a_killed_engine_cuts_the_streams_it_serves(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    tenant = make_tenant(cluster)
    (adapter,) = make_adapters(cluster, tenant, 1, tmp_path, prefix="kill")
    first = ask(cluster, tenant, adapter)
    assert first["status"] == 200, first
    serving = answered_by(first)  # where placement put it: this load's streams go there
    load = SteadyLoad(cluster, tenant, [adapter])
    load.start()
    try:
        wait_until(lambda: cluster.engine_stats(serving).get("streaming", 0) >= 2, 30)
        cluster.services[serving].kill()  # SIGKILL mid-stream, no drain
        time.sleep(2.0)
    finally:
        streams = load.stop()
        cluster.start_fake_engine(serving)
        wait_until(lambda: everywhere(cluster, engines[serving]), 60, what="back in rotation")
    cut = [s for s in streams if s.cut]
    report.record(
        "engine SIGKILLed under the same load, no drain (control)",
        f"{len(streams)} streams: {len(cut)} cut ({sorted({s.outcome for s in cut})})",
        "-",
        f"{serving} back in rotation",
    )
    assert cut, "a killed engine cut no stream: the drill could not have seen one"


@pytest.mark.skipif(
    not os.environ.get("LORAPLEX_REAL_ROLL"),
    reason="7 minutes on this 2-core host (two vLLM restarts): LORAPLEX_REAL_ROLL=1 runs it; "
    "the stand-in roll above drills the same drain in make test",
)
def test_a_drained_rolling_restart_of_the_real_engines_cuts_no_stream(
    cluster: Cluster, real_engines: dict[str, str], tmp_path: Path
) -> None:
    def start_real(host: str) -> None:
        cluster.start_real_engine(host)
        cluster.wait_for_real_engine(host, timeout_s=480)  # a busy 2-core host: minutes

    for host in REAL_ENGINE_HOSTS:  # an earlier drill may have killed them when it was done
        if not cluster.services[host].is_running:
            start_real(host)
        if not cluster.services[f"{host}-agent"].is_running:
            cluster.start_agent(host, kind="vllm", base_model=REAL_MODEL)
        wait_until(lambda h=host: everywhere(cluster, real_engines[h]), 60, what="in rotation")  # type: ignore[misc]
    tenant = make_tenant(cluster)
    (adapter,) = make_adapters(cluster, tenant, 1, tmp_path, prefix="rroll", base=REAL_MODEL)
    assert ask(cluster, tenant, adapter)["status"] == 200

    load = SteadyLoad(cluster, tenant, [adapter], per_api=1)  # two cores: one stream per API
    load.start()
    try:
        rolled = {h: roll(cluster, h, real_engines[h], start_real) for h in REAL_ENGINE_HOSTS}
    finally:
        streams = load.stop()
        for host in REAL_ENGINE_HOSTS:  # the real engines' part is done: free the cores
            cluster.services[host].kill()
    failed = [s for s in streams if s.failed]
    cut = [s for s in streams if s.cut]
    in_roll = during(streams, rolled["vllm1"]["out_at"], rolled["vllm2"]["back_at"])
    longest_ttft = max((s.ttft_s or 0.0 for s in in_roll), default=0.0)
    figures = [
        ("requests (streams)", f"{len(streams)}, {len(in_roll)} during the roll"),
        ("failed", str(len(failed))),
        ("cut streams", str(len(cut))),
        ("longest TTFT during the roll", f"{longest_ttft:.2f} s"),
    ]
    for host, r in rolled.items():
        out_s = r["back_at"] - r["out_at"]
        figures.append((host, f"drain {r['drain_s']:.1f} s (drained={r['drained']}), "
                              f"out of rotation {out_s:.1f} s"))  # fmt: skip
    print(f"\n[rolling restart, vLLM CPU engines]\n{table(figures)}")
    report.record(
        "rolling restart, drained (real vLLM CPU hosts, rank 64)",
        f"{len(streams)} streams via both APIs: {len(failed)} failed, {len(cut)} cut; "
        f"longest TTFT in roll {longest_ttft:.2f}s",
        "-",
        "; ".join(f"{h} out {r['back_at'] - r['out_at']:.1f}s" for h, r in rolled.items()),
    )
    assert all(r["drained"] for r in rolled.values()), rolled
    assert in_roll, "no stream ran during the roll"
    assert not failed, [(s.api, s.outcome) for s in failed]
    assert not cut
