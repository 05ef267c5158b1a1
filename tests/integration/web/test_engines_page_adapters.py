"""The engines page shows the adapters waiting on an engine, and each busy adapter's TTFT.

A stand-in engine (tests/system/fake_engine.py) with one GPU slot behind a real API process:
a slow answer on one adapter holds the slot, so a request for a second adapter waits for
it, and the page lists that adapter as waiting for a GPU slot. Once both answered, the page
shows each adapter's requests, TTFT and loads.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from loraplex.bench.server import api_process
from loraplex.settings import Settings
from tests.integration.conftest import wait_in_rotation
from tests.integration.web.conftest import sign_in
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_valid
from tests.support.lora_files import TINY_BASE
from tests.support.operators import operator_key
from tests.support.stand_in_engine import stand_in_engine

SLOW = "tokens=40 every=0.05"  # the stand-in's pacing: about 2 s of answer
QUICK = "tokens=2 every=0.01"


async def _chat(api: httpx.AsyncClient, key: str, model: str, content: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 40}
    answer = await api.post(
        "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert answer.status_code == 200, answer.text


async def _row_when(page: httpx.AsyncClient, marker: str, text: str) -> str:
    """The engines table's row that carries `marker`, once it contains `text`."""
    for _ in range(400):
        table = (await page.get("/admin/engines/live")).text
        if marker in table:
            row = table[table.index(marker) :].split("</tr>")[0]
            if text in row:
                return row
        await asyncio.sleep(0.02)
    raise AssertionError(f"{marker} never showed {text!r}")


async def _tenant(api: httpx.AsyncClient) -> tuple[str, str]:
    """A new tenant and an inference key of it."""
    slug = f"figures-{secrets.token_hex(3)}"
    made = await api.post(
        "/api/v1/tenants", json={"slug": slug, "name": slug, "plan": "enterprise"}
    )
    tenant_id = made.json()["id"]
    key = await api.post(
        f"/api/v1/tenants/{tenant_id}/api-keys", json={"name": "k", "scopes": ["inference"]}
    )
    return tenant_id, key.json()["key"]


async def _adapter(api: httpx.AsyncClient, tenant_id: str, folder: Path) -> tuple[str, str]:
    """An adapter of the tenant with one version: its name and the version's id."""
    name = await create_adapter(api, tenant_id)
    version = await upload_valid(api, tenant_id, name, folder)
    return name, str(version["id"])


async def test_the_engines_page_shows_an_adapter_waiting_for_a_slot_and_adapter_ttfts(
    settings: Settings, operator_user: Any, tmp_path: Path
) -> None:
    live = replace(settings, engine_health_interval_s=0.5)
    key_of_operator = await asyncio.to_thread(operator_key, settings, "figures")
    ops = {"Authorization": f"Bearer {key_of_operator}"}
    name = f"slots-{secrets.token_hex(3)}"
    with api_process(live.to_env()) as (url, _), stand_in_engine(TINY_BASE.name, name) as engine:
        async with (
            httpx.AsyncClient(base_url=url, headers=ops, timeout=60) as api,
            httpx.AsyncClient(base_url=url, timeout=60) as page,
        ):
            base = await ensure_tiny_base(api)
            tenant_id, key = await _tenant(api)
            holder, holder_id = await _adapter(api, tenant_id, tmp_path / "holder")
            waiter, waiter_id = await _adapter(api, tenant_id, tmp_path / "waiter")
            body = {"name": name, "url": engine, "kind": "vllm", "base_model": base,
                    "max_lora_rank": 64, "gpu_slots": 1, "host_slots": 2}  # fmt: skip
            registered = await api.post("/api/v1/engines", json=body)
            assert registered.status_code == 201, registered.text
            engine_id = registered.json()["id"]
            await asyncio.to_thread(wait_in_rotation, url, ops, [engine_id])
            await sign_in(page, operator_user.email, operator_user.password)
            try:
                slow = asyncio.create_task(_chat(api, key, holder, SLOW))
                await asyncio.sleep(0.5)  # loaded and running: it holds the only GPU slot
                quick = asyncio.create_task(_chat(api, key, waiter, QUICK))
                waiting = await _row_when(page, f'data-waiting="{waiter_id}"', "gpu slot")
                await asyncio.gather(slow, quick)
                table = (await page.get("/admin/engines/live")).text
            finally:
                await api.delete(f"/api/v1/engines/{engine_id}")

    assert f"<td>{name}</td>" in waiting
    for version_id in (holder_id, waiter_id):
        row = table[table.index(f'data-figures="{version_id}"') :].split("</tr>")[0]
        assert "<td data-requests>1</td>" in row
        assert "<td data-ttft-p50>—</td>" not in row  # a TTFT in ms
        assert "<td data-engine-loads>1</td>" in row and "<td data-cold-loads>1</td>" in row
