"""Rank classes on real SGLang engines: each adapter goes to the smallest class that fits.

The session's base model is served by two SGLang engines, `--max-lora-rank` 64 and 16. An
r64 adapter can only run on the r64 engine; r8 and r16 adapters belong on the r16 engine
while it has room, which keeps the large class free for the adapters only it can hold.
"""

from __future__ import annotations

from uuid import UUID

import httpx
import pytest

from loraplex.serving.loader import engine_adapter_name
from tests.integration.conftest import RANKS, Served

pytestmark = pytest.mark.engine


def _engine_side_name(served: Served, adapter: str) -> str:
    url = f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters/{adapter}/versions"
    versions = httpx.get(url, headers=served.headers(), timeout=10).json()
    items = versions["items"] if isinstance(versions, dict) else versions
    return engine_adapter_name(UUID(items[0]["id"]))


def _held(served: Served, engine_id: str) -> set[str]:
    url = f"{served.url}/api/v1/engines/{engine_id}/adapters"
    return {
        a["name"] for a in httpx.get(url, headers=served.operator(), timeout=10).json()["adapters"]
    }


def test_each_adapter_runs_on_the_smallest_rank_class_that_fits(served: Served) -> None:
    by_rank = {engine.max_lora_rank: served.engine_ids[engine.url] for engine in served.engines}
    assert sorted(by_rank) == [16, 64]
    names = {rank: _engine_side_name(served, served.adapters[rank][0]) for rank in RANKS}
    with httpx.Client(base_url=served.url, headers=served.headers(), timeout=120) as http:
        for _ in range(3):
            for rank in RANKS:
                body = {
                    "model": served.adapters[rank][0],
                    "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 4,
                }
                response = http.post("/v1/chat/completions", json=body)
                assert response.status_code == 200, response.text
                on_small, on_large = _held(served, by_rank[16]), _held(served, by_rank[64])
                assert names[64] not in on_small, "an r64 adapter reached the r16 engine"
    assert {names[8], names[16]} <= on_small
    assert names[64] in on_large
