"""Rank classes on real SGLang engines: each adapter goes to the smallest class that fits.

The session's base model is served by two SGLang engines, `--max-lora-rank` 64 and 16. An
r64 adapter can only run on the r64 engine; r8 and r16 adapters belong on the r16 engine
while it has room, which keeps the large class free for the adapters only it can hold.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from loraplex.serving.loader import engine_adapter_name
from tests.integration.conftest import FILES, RANKS, Served
from tests.support.trained import trained_adapter

pytestmark = pytest.mark.engine


def _upload_fresh(served: Served, root: Path) -> dict[int, tuple[str, str]]:
    """New adapters of each rank, never placed before: rank -> (name, engine-side name)."""
    fresh = {}
    tenant = f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters"
    with httpx.Client(headers=served.headers(), timeout=60) as http:
        for rank in RANKS:
            name = f"rank-{rank}-{secrets.token_hex(3)}"
            folder = trained_adapter(
                served.engine.model_dir, root / name, rank=rank, seed=rank, base_name=served.base
            )
            http.post(tenant, json={"name": name, "base_model": served.base})
            files = [("file", (n, (folder / n).read_bytes())) for n in FILES]
            response = http.post(f"{tenant}/{name}/versions", files=files)
            assert response.status_code == 201, response.text
            fresh[rank] = (name, engine_adapter_name(UUID(response.json()["id"])))
    return fresh


def _held(served: Served, engine_id: str) -> set[str]:
    url = f"{served.url}/api/v1/engines/{engine_id}/adapters"
    return {
        a["name"] for a in httpx.get(url, headers=served.operator(), timeout=10).json()["adapters"]
    }


def test_each_adapter_runs_on_the_smallest_rank_class_that_fits(
    served: Served, tmp_path: Path
) -> None:
    by_rank = {engine.max_lora_rank: served.engine_ids[engine.url] for engine in served.engines}
    assert sorted(by_rank) == [16, 64]
    fresh = _upload_fresh(served, tmp_path)
    names = {rank: engine_name for rank, (_, engine_name) in fresh.items()}
    with httpx.Client(base_url=served.url, headers=served.headers(), timeout=120) as http:
        for _ in range(3):
            for rank in RANKS:
                body = {
                    "model": fresh[rank][0],
                    "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 4,
                }
                response = http.post("/v1/chat/completions", json=body)
                assert response.status_code == 200, response.text
                on_small, on_large = _held(served, by_rank[16]), _held(served, by_rank[64])
                assert names[64] not in on_small, "an r64 adapter reached the r16 engine"
    assert {names[8], names[16]} <= on_small
    assert names[64] in on_large


def test_the_engines_api_shows_each_engines_own_running_and_queued_counts(
    served: Served,
) -> None:
    for engine_id in served.engine_ids.values():
        live = httpx.get(
            f"{served.url}/api/v1/engines/{engine_id}", headers=served.operator(), timeout=10
        ).json()["live"]
        assert live["engine_running"] is not None and live["engine_running"] >= 0
        assert live["engine_waiting"] is not None and live["engine_waiting"] >= 0
