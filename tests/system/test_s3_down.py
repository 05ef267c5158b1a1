"""The S3 server down while a tenant asks for a cold adapter: a clean 503 with Retry-After
for that adapter, while an adapter already on an engine keeps serving; the node cache keeps
no partial download."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from loraplex.dev.make_adapter import make_adapter
from tests.support.hygiene import leaks
from tests.system import report
from tests.system.cluster import FAKE_MODEL, Cluster
from tests.system.conftest import MODEL_DIR, Tenant, make_tenant
from tests.system.drills import CHAT_PATH, assert_clean_error, summary

FILES = ("adapter_config.json", "adapter_model.safetensors")


def _upload(cluster: Cluster, tenant: Tenant, name: str, folder: Path) -> None:
    """Create adapter `name` and upload `folder` as its first version (S3 up)."""
    assert cluster.client is not None
    adapters = f"{cluster.api_url('api1')}/api/v1/tenants/{tenant.id}/adapters"
    made = cluster.client.request(
        "POST", adapters, headers=tenant.headers, json={"name": name, "base_model": FAKE_MODEL}
    )
    assert made["status"] == 201, made
    files = [["file", n, str(folder / n)] for n in FILES]
    version = cluster.client.request(
        "POST", f"{adapters}/{name}/versions", headers=tenant.headers, files=files, timeout=60
    )
    assert version["status"] == 201, version


def _ask(cluster: Cluster, tenant: Tenant, model: str, stream: bool = False) -> dict[str, Any]:
    assert cluster.client is not None
    body = {"model": model, "messages": [{"role": "user", "content": "tokens=3"}]}
    url = cluster.api_url("api1") + CHAT_PATH
    if stream:
        body["stream"] = True
        return cluster.client.stream(url, headers=tenant.headers, json=body).result(60)
    return cluster.client.request("POST", url, headers=tenant.headers, json=body, timeout=60)


def test_s3_down_refuses_a_cold_adapter_cleanly_while_loaded_ones_serve(
    cluster: Cluster, engines: dict[str, str], tmp_path: Path
) -> None:
    tenant = make_tenant(cluster)
    warm, cold = f"warm-{secrets.token_hex(2)}", f"cold-{secrets.token_hex(2)}"
    for seed, name in enumerate((warm, cold)):
        folder = make_adapter(
            MODEL_DIR, tmp_path / name, rank=8, seed=seed, random=True, base_name=FAKE_MODEL
        )
        _upload(cluster, tenant, name, folder)
    first = _ask(cluster, tenant, warm)
    assert first["status"] == 200, first  # now on an engine and in api1's node cache

    cluster.services["s3"].stop()
    try:
        refused = _ask(cluster, tenant, cold)
        refused_stream = _ask(cluster, tenant, cold, stream=True)
        served = _ask(cluster, tenant, warm)
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
    incoming = cluster.settings("api1").data_dir / "cache" / ".incoming"
    partial = [p.name for p in incoming.iterdir()] if incoming.exists() else []
    assert partial == []
    report.record(
        "S3 server down, cold adapter asked",
        f"cold: {summary([refused])} Retry-After {refused['headers']['retry-after']}, "
        f"streamed: {refused_stream['status']} {refused_stream.get('text') or streamed[-1:]}; "
        f"loaded: {served['status']}",
        "node cache: no partial download",
        "S3 restarted (moto: empty)",
    )
