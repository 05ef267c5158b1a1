"""An engine host killed (SIGKILL: its engine and its agent) with streams in flight on it.

Requests still waiting for their first token are retried on the other engine host and
complete; streams past their first token end with an error event; none hangs; the dead
engine leaves the rotation, the adapters it held are placed on the other host when asked
for, and the host rejoins (its agent registers it again) when it comes back. The engine
hosts run stand-in engines (fake_engine.py) paced by the prompt, so each request's state at
the kill is known.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.hygiene import leaks
from tests.system import report
from tests.system.adapters import (
    SPREAD_TOKENS,
    answered_by,
    ask,
    engine_name,
    on_engine,
    spread_over_engines,
)
from tests.system.cluster import Cluster
from tests.system.conftest import in_rotation, make_tenant, usage_totals
from tests.system.drills import wait_until
from tests.system.engine_streams import (
    is_error,
    outcome,
    served_by,
    streams_on_engine1,
    tokens_received,
)

STREAM_LIMIT_S = 30.0  # every stream ends well within this (no hang)


def test_engine_host_killed_retries_before_first_token_and_ends_streams_past_it(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    tenant = make_tenant(cluster)  # its own usage rows, to compare with what it received
    placed = spread_over_engines(cluster, tenant, tmp_path, want_on="engine1")
    on_engine1 = placed["engine1"]
    flight = streams_on_engine1(cluster, tenant, on_engine1[0])
    past, held, stats = flight.past, flight.held, flight.engine1
    cluster.kill_engine_host("engine1")
    killed_at = time.monotonic()
    try:
        results_past = [f.result(STREAM_LIMIT_S) for f in past]
        results_held = [f.result(STREAM_LIMIT_S) for f in held]
        ended_s = time.monotonic() - killed_at
        left_s = wait_until(lambda: not in_rotation(cluster, engines["engine1"]), 30)
        moved = [ask(cluster, tenant, name) for name in on_engine1]
    finally:
        restarted_at = time.monotonic()
        cluster.start_engine_host("engine1")  # the engine, then its agent, which registers it
    wait_until(lambda: in_rotation(cluster, engines["engine1"]), 30)
    rejoin_s = time.monotonic() - restarted_at

    # The dead host's adapters: asked for again, each is placed on engine2 and served there.
    assert [r["status"] for r in moved] == [200] * len(on_engine1), moved
    assert {answered_by(r) for r in moved} == {"engine2"}
    assert {engine_name(cluster, tenant, n) for n in on_engine1} <= on_engine(cluster, "engine2")

    # Before the first token: retried on engine2, and the client never knew.
    assert all(r["status"] == 200 for r in results_held), results_held
    assert [outcome(r) for r in results_held] == ["completed"] * len(held)
    assert all(served_by(r) == {"engine2"} for r in results_held)
    # Past the first token: on engine1 an error event, on engine2 a normal end.
    cut = [r for r in results_past if "engine1" in served_by(r)]
    assert cut, "no stream was past its first token on engine1"
    assert all(outcome(r) == "error event" for r in cut), [outcome(r) for r in cut]
    assert all(outcome(r) == "completed" for r in results_past if r not in cut)
    errors = [e for r in cut for e in r["events"] if is_error(e)]
    assert not [leaks(e) for e in errors if leaks(e)], errors
    # Billing: every stream is recorded, the cut ones too, at the tokens the client got.
    # (Its earlier requests too: the adapters asked for before and after the kill.)
    asked = sum(map(len, placed.values()))
    results = results_past + results_held
    received = sum(tokens_received(r) for r in results) + asked * SPREAD_TOKENS
    received += sum(
        len(json.loads(r["text"])["choices"][0]["message"]["content"].split()) for r in moved
    )
    requests = len(results) + asked + len(moved)
    wait_until(lambda: usage_totals(cluster, tenant)["requests"] == requests, 20, 0.5)
    stored = usage_totals(cluster, tenant)
    assert stored["completion_tokens"] == received, (stored, received)
    assert stored["cut_streams"] >= len(cut)
    report.record(
        "engine host killed mid-stream (stand-in engine + agent)",
        f"{stats['held']} held before 1st token -> all completed on engine2; "
        f"{len(cut)} past 1st token -> error event; all ended {ended_s:.1f}s after kill; "
        f"its {len(on_engine1)} adapter(s) asked again -> 200 from engine2",
        f"usage: {stored['requests']} requests, {stored['completion_tokens']} completion "
        f"tokens = {received} received, {stored['cut_streams']} cut",
        f"left rotation {left_s:.1f}s after streams ended; in rotation again {rejoin_s:.1f}s after the host restarted",
    )
