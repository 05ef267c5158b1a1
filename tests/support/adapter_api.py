"""Helpers for tests that drive the adapter API: a registered tiny base model and uploads."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from loraplex.adapters.facts import facts_to_json
from tests.support.lora_files import TINY_BASE, write_adapter


async def ensure_tiny_base(operator: Any) -> str:
    """Register the tiny base model the crafted adapters fit (once per session); return its name."""
    body = {**facts_to_json(TINY_BASE), "source": "generated://tiny-llama"}
    response = await operator.post("/api/v1/base-models", json=body)
    assert response.status_code in (201, 409), response.text
    return TINY_BASE.name


async def upload_training_file(api: Any, rows: list[dict[str, Any]]) -> str:
    """Upload `rows` as a tenant's JSONL fine-tuning file through `/v1/files`; its id."""
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    uploaded = await api.post(
        "/v1/files",
        files={"file": ("train.jsonl", data, "application/jsonl")},
        data={"purpose": "fine-tune"},
    )
    assert uploaded.status_code == 200, uploaded.text
    return str(uploaded.json()["id"])


async def create_adapter(
    api: Any, tenant_id: str, name: str | None = None, base: str = TINY_BASE.name
) -> str:
    """Create an adapter for the tenant; return its name."""
    name = name or f"a-{secrets.token_hex(3)}"
    response = await api.post(
        f"/api/v1/tenants/{tenant_id}/adapters", json={"name": name, "base_model": base}
    )
    assert response.status_code == 201, response.text
    return name


async def upload_files(api: Any, tenant_id: str, adapter: str, paths: list[Path]) -> Any:
    """POST the files as one multipart upload; return the response."""
    handles = [p.open("rb") for p in paths]
    try:
        files = [
            ("file", (p.name, h, "application/octet-stream"))
            for p, h in zip(paths, handles, strict=True)
        ]
        return await api.post(
            f"/api/v1/tenants/{tenant_id}/adapters/{adapter}/versions", files=files
        )
    finally:
        for handle in handles:
            handle.close()


async def upload_valid(
    api: Any, tenant_id: str, adapter: str, folder: Path, **adapter_options: Any
) -> dict[str, Any]:
    """Write a valid tiny adapter into `folder`, upload it, and return the version."""
    write_adapter(folder, **adapter_options)
    response = await upload_files(
        api,
        tenant_id,
        adapter,
        [folder / "adapter_config.json", folder / "adapter_model.safetensors"],
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


async def adapter_with_versions(operator: Any, tenant: Any, folder: Path, count: int) -> str:
    """A new adapter of `tenant` on the tiny base with `count` ready versions; its name."""
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    for n in range(count):
        await upload_valid(tenant.api, tenant.id, adapter, folder / f"v{n}")
    return adapter
