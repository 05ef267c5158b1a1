"""Adapters on the cluster: made for the stand-ins' base model, uploaded, asked for, found."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any
from uuid import UUID

from loraplex.dev.make_adapter import make_adapter
from loraplex.serving.loader import engine_adapter_name
from tests.system.cluster import FAKE_MODEL, Cluster
from tests.system.conftest import MODEL_DIR, Tenant
from tests.system.drills import CHAT_PATH

FILES = ("adapter_config.json", "adapter_model.safetensors")
SPREAD_TOKENS = 20
SLOW = f"tokens={SPREAD_TOKENS} every=0.05"  # a second's answer: two asked together overlap


def upload(
    cluster: Cluster, tenant: Tenant, name: str, folder: Path, base: str = FAKE_MODEL
) -> None:
    """Create adapter `name` for `base` and upload `folder` as its first version."""
    assert cluster.client is not None
    adapters = f"{cluster.api_url('api1')}/api/v1/tenants/{tenant.id}/adapters"
    made = cluster.client.request(
        "POST", adapters, headers=tenant.headers, json={"name": name, "base_model": base}
    )
    assert made["status"] == 201, made
    files = [["file", n, str(folder / n)] for n in FILES]
    version = cluster.client.request(
        "POST", f"{adapters}/{name}/versions", headers=tenant.headers, files=files, timeout=60
    )
    assert version["status"] == 201, version


def make_adapters(
    cluster: Cluster,
    tenant: Tenant,
    count: int,
    workdir: Path,
    prefix: str = "a",
    base: str = FAKE_MODEL,
) -> list[str]:
    """`count` new rank-8 adapters of the tenant's for `base`, uploaded; their names."""
    names = []
    for seed in range(count):
        name = f"{prefix}-{secrets.token_hex(3)}"
        folder = make_adapter(
            MODEL_DIR, workdir / name, rank=8, seed=seed, random=True, base_name=base
        )
        upload(cluster, tenant, name, folder, base=base)
        names.append(name)
    return names


def ask(
    cluster: Cluster,
    tenant: Tenant,
    model: str,
    stream: bool = False,
    content: str = "tokens=3",
    host: str = "api1",
) -> dict[str, Any]:
    """One chat request for `model` from the client host; its reply (or stream's result)."""
    assert cluster.client is not None
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}]}
    url = cluster.api_url(host) + CHAT_PATH
    if stream:
        body["stream"] = True
        return cluster.client.stream(url, headers=tenant.headers, json=body).result(60)
    return cluster.client.request("POST", url, headers=tenant.headers, json=body, timeout=60)


def answered_by(reply: dict[str, Any]) -> str:
    """The engine host that answered a non-streamed request (the stand-ins answer with
    their own name)."""
    content = json.loads(reply["text"])["choices"][0]["message"]["content"]
    return str(content.split()[0])


def on_engine(cluster: Cluster, host: str) -> set[str]:
    """The engine-side names of the adapters the stand-in engine on `host` holds."""
    return set(cluster.engine_stats(host).get("loaded", []))  # type: ignore[arg-type]


def engine_name(cluster: Cluster, tenant: Tenant, adapter: str) -> str:
    """The engine-side name of the adapter's current version (`lpx-<version id>`)."""
    assert cluster.client is not None
    url = f"{cluster.api_url('api1')}/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions"
    reply = cluster.client.request("GET", url, headers=tenant.headers)
    body = json.loads(reply["text"])
    versions = body["items"] if isinstance(body, dict) else body
    return engine_adapter_name(UUID(versions[-1]["id"]))


def held_by(cluster: Cluster, engine_id: str, host: str = "api1") -> set[str]:
    """The engine-side names the API on `host` sees the engine holding (its poller's view)."""
    assert cluster.client is not None
    reply = cluster.client.request(
        "GET",
        f"{cluster.api_url(host)}/api/v1/engines/{engine_id}/adapters",
        headers={"Authorization": f"Bearer {cluster.operator_key}"},
    )
    return {a["name"] for a in json.loads(reply["text"])["adapters"]}


def spread_over_engines(
    cluster: Cluster, tenant: Tenant, workdir: Path, want_on: str, most: int = 4
) -> dict[str, list[str]]:
    """Upload adapters and ask for them two at a time until `want_on` holds at least one;
    engine host -> the adapters answered there. Placement picks the engine: with both idle
    it may pick the same one every time, but not while that one is busy with the other."""
    assert cluster.client is not None
    url = cluster.api_url("api1") + CHAT_PATH
    placed: dict[str, list[str]] = {}
    for _ in range(most):
        pair = make_adapters(cluster, tenant, 2, workdir)
        asked = [
            cluster.client.submit(
                {
                    "op": "request",
                    "method": "POST",
                    "url": url,
                    "headers": tenant.headers,
                    "json": {"model": name, "messages": [{"role": "user", "content": SLOW}]},
                    "timeout": 60,
                }
            )
            for name in pair
        ]
        for name, future in zip(pair, asked, strict=True):
            reply = future.result(60)
            assert reply["status"] == 200, reply
            placed.setdefault(answered_by(reply), []).append(name)
        if want_on in placed:
            return placed
    raise AssertionError(f"placement never chose {want_on}: {placed}")
