"""An engine host's link cut (`ip link set … down`) with streams in flight, then restored.

A cut link gives no error, only silence: streams past their first token end with an error
event when the idle timeout passes; requests still waiting for their first token end by the
TTFT timeout; none hangs. The engine leaves the rotation while cut and rejoins once restored.
"""

from __future__ import annotations

import time

from tests.support.hygiene import leaks
from tests.system import report
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
    cluster: Cluster, engines: dict[str, str]
) -> None:
    tenant = make_tenant(cluster)
    flight = streams_on_engine1(cluster, tenant)
    cluster.network.set_link("engine1", up=False)
    cut_at = time.monotonic()
    try:
        results_past = [f.result(STREAM_LIMIT_S) for f in flight.past]
        results_held = [f.result(STREAM_LIMIT_S) for f in flight.held]
        ended_s = time.monotonic() - cut_at
        left_s = wait_until(lambda: not in_rotation(cluster, engines["engine1"]), 30)
    finally:
        cluster.network.set_link("engine1", up=True)
    rejoin_s = wait_until(lambda: in_rotation(cluster, engines["engine1"]), 30)
    # The stand-in still sleeps on requests whose connections died with the link: start it
    # afresh so later drills count only their own streams.
    cluster.services["engine1"].kill()
    cluster.start_fake_engine("engine1")
    wait_until(lambda: in_rotation(cluster, engines["engine1"]), 30)

    cut = [r for r in results_past if "engine1" in served_by(r)]
    assert cut, "no stream was past its first token on engine1"
    assert all(outcome(r) == "error event" for r in cut), [outcome(r) for r in cut]
    assert all(outcome(r) == "completed" for r in results_past if r not in cut)
    held_outcomes = [outcome(r) for r in results_held]
    assert set(held_outcomes) <= {"completed", "error event"}, held_outcomes
    errors = [e for r in results_past + results_held for e in r["events"] if is_error(e)]
    assert not [leaks(e) for e in errors if leaks(e)], errors
    held_codes = sorted({c for r in results_held for c in error_codes(r)})
    report.record(
        "engine host link cut, then restored (stand-in engines)",
        f"{len(cut)} past 1st token -> error event {sorted({c for r in cut for c in error_codes(r)})}; "
        f"{flight.engine1['held']} held before 1st token -> "
        f"{held_outcomes.count('completed')}/{len(held_outcomes)} completed, "
        f"errors {held_codes}; all ended {ended_s:.1f}s after the cut",
        "-",
        f"left rotation {left_s:.1f}s after streams ended; rejoined {rejoin_s:.1f}s after restore",
    )
