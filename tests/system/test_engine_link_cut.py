"""An engine host's link cut (`ip link set … down`) with streams in flight, then restored.

A cut link gives no error, only silence: streams past their first token end with an error
event when the idle timeout passes; requests still waiting for their first token are tried
again on the other host when the TTFT timeout passes, and complete there; none hangs. The
engine leaves the rotation while cut and rejoins once restored, with the adapters it held;
when its engine then restarts empty, its agent says so and they are loaded back.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.hygiene import leaks
from tests.system import report
from tests.system.adapters import engine_name, held_by, on_engine, spread_over_engines
from tests.system.cluster import Cluster
from tests.system.conftest import in_rotation, make_tenant
from tests.system.drills import wait_until
from tests.system.engine_streams import (
    error_codes,
    is_error,
    outcome,
    served_by,
    streams_on_engine1,
)

STREAM_LIMIT_S = 30.0  # every stream ends well within this (no hang)


def test_engine_link_cut_ends_every_stream_and_the_engine_rejoins_when_restored(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    tenant = make_tenant(cluster)
    adapters = spread_over_engines(cluster, tenant, tmp_path, want_on="engine1")["engine1"]
    names = {engine_name(cluster, tenant, a) for a in adapters}
    flight = streams_on_engine1(cluster, tenant, adapters[0])
    cluster.network.set_link("engine1", up=False)
    cut_at = time.monotonic()
    try:
        results_past = [f.result(STREAM_LIMIT_S) for f in flight.past]
        results_held = [f.result(STREAM_LIMIT_S) for f in flight.held]
        ended_s = time.monotonic() - cut_at
        left_s = wait_until(lambda: not in_rotation(cluster, engines["engine1"]), 30)
    finally:
        cluster.network.set_link("engine1", up=True)
    rejoin_s = wait_until(lambda: in_rotation(cluster, engines["engine1"]), 30, what="rejoined")
    # Back with what it held: the engine kept its adapters, and placement adopts them.
    wait_until(lambda: names <= held_by(cluster, engines["engine1"]), 15)
    # The stand-in still sleeps on requests whose connections died with the link: restart
    # the engine (not its agent) so later drills count only their own streams. It comes
    # back empty; its agent reports the restart and placement loads back what it held.
    # A real engine is down for tens of seconds while it restarts: keep it down until the
    # API has seen it and for a few of its agent's probes, before starting it again.
    cluster.services["engine1"].kill()
    wait_until(lambda: not in_rotation(cluster, engines["engine1"]), 30, what="seen down")
    time.sleep(3 * cluster.settings("engine1").agent_heartbeat_s)
    cluster.start_fake_engine("engine1")
    restarted_at = time.monotonic()
    reloaded_s = wait_until(
        lambda: names <= on_engine(cluster, "engine1"), 30, what="loaded back after the restart"
    )
    restored_s = time.monotonic() - restarted_at

    cut = [r for r in results_past if "engine1" in served_by(r)]
    assert cut, "no stream was past its first token on engine1"
    assert all(outcome(r) == "error event" for r in cut), [outcome(r) for r in cut]
    assert all(outcome(r) == "completed" for r in results_past if r not in cut)
    # Held before their first token by the silent host: tried again on engine2, completed.
    held_codes = [error_codes(r) for r in results_held]
    assert [outcome(r) for r in results_held] == ["completed"] * len(results_held), held_codes
    assert all(served_by(r) == {"engine2"} for r in results_held), results_held
    errors = [e for r in results_past + results_held for e in r["events"] if is_error(e)]
    assert not [leaks(e) for e in errors if leaks(e)], errors
    report.record(
        "engine host link cut, then restored (stand-in engine + agent)",
        f"{len(cut)} past 1st token -> error event "
        f"{sorted({c for r in cut for c in error_codes(r)})}; "
        f"{flight.engine1['held']} held before 1st token -> all completed on engine2 after "
        f"the TTFT timeout; all ended {ended_s:.1f}s after the cut",
        "-",
        f"left rotation {left_s:.1f}s after streams ended; rejoined {rejoin_s:.1f}s after "
        f"restore with its {len(names)} adapter(s); engine restarted empty -> reloaded "
        f"{max(reloaded_s, restored_s):.1f}s later",
    )
