"""The S3 server down while a tenant asks for a cold adapter: a clean 503 with Retry-After
for that adapter, while an adapter already on an engine keeps serving; the node cache keeps
no partial download."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.hygiene import leaks
from tests.system import report
from tests.system.adapters import ask, make_adapters
from tests.system.cluster import Cluster
from tests.system.conftest import make_tenant
from tests.system.drills import assert_clean_error, summary


def test_s3_down_refuses_a_cold_adapter_cleanly_while_loaded_ones_serve(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    tenant = make_tenant(cluster)
    warm, cold = make_adapters(cluster, tenant, 2, tmp_path)
    first = ask(cluster, tenant, warm)
    assert first["status"] == 200, first  # now on an engine and in its agent's cache

    cluster.services["s3"].stop()
    try:
        refused = ask(cluster, tenant, cold)
        refused_stream = ask(cluster, tenant, cold, stream=True)
        served = ask(cluster, tenant, warm)
    finally:
        cluster.start_s3()  # moto keeps objects in memory: it comes back empty
    assert refused["status"] == 503, refused
    assert int(refused["headers"]["retry-after"]) > 0
    assert_clean_error(refused)
    # Streamed: refused the same way before the stream starts, or ended by an error event.
    streamed = refused_stream.get("events") or []
    assert refused_stream["status"] == 503 or (
        streamed and '"code":"object_store_unavailable"' in streamed[-1].replace(" ", "")
    ), refused_stream
    assert not leaks(json.dumps(refused_stream)), refused_stream
    assert served["status"] == 200, served
    incoming = [cluster.agent_cache(host) / ".incoming" for host in engines]
    partial = [p.name for folder in incoming if folder.exists() for p in folder.iterdir()]
    assert partial == []
    report.record(
        "S3 server down, cold adapter asked",
        f"cold: {summary([refused])} Retry-After {refused['headers']['retry-after']}, "
        f"streamed: {refused_stream['status']} {refused_stream.get('text') or streamed[-1:]}; "
        f"loaded: {served['status']}",
        "agents' node caches: no partial download",
        "S3 restarted (moto: empty)",
    )
