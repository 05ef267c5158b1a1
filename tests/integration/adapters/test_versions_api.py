"""Adapter versions through the API, against the real S3 server and PostgreSQL."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_files, upload_valid
from tests.support.lora_files import write_adapter


async def test_upload_becomes_ready_and_downloads_with_the_same_sha256(
    operator: Api, make_tenant, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    version = await upload_valid(tenant.api, tenant.id, adapter, tmp_path / "v1", rank=8)
    local_sha = hashlib.sha256(
        (tmp_path / "v1" / "adapter_model.safetensors").read_bytes()
    ).hexdigest()
    assert version["status"] == "ready" and version["number"] == 1
    assert version["rank"] == 8 and version["sha256"] == local_sha
    assert set(version["target_modules"]) == {"q_proj", "v_proj", "down_proj"}

    download = (
        await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions/1/download")
    ).json()
    weights = next(f for f in download["files"] if f["name"] == "adapter_model.safetensors")
    assert weights["url"].startswith("http") and "Signature" in weights["url"]  # presigned on S3
    body = httpx.get(weights["url"]).content
    assert hashlib.sha256(body).hexdigest() == local_sha == weights["sha256"]


async def test_files_stream_through_the_api_too(operator: Api, make_tenant, tmp_path: Path) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    await upload_valid(tenant.api, tenant.id, adapter, tmp_path / "v1")
    response = await tenant.api.get(
        f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions/1/files/adapter_model.safetensors"
    )
    assert response.status_code == 200
    assert response.content == (tmp_path / "v1" / "adapter_model.safetensors").read_bytes()


async def test_a_tar_gz_archive_uploads_like_two_files(
    operator: Api, make_tenant, tmp_path: Path
) -> None:
    import tarfile

    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    folder = write_adapter(tmp_path / "adapter", readme=True)
    archive = tmp_path / "adapter.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="my-adapter")
    response = await upload_files(tenant.api, tenant.id, adapter, [archive])
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "ready"


async def test_versions_are_numbered_and_listed_newest_first(
    operator: Api, make_tenant, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    for n in range(3):
        await upload_valid(tenant.api, tenant.id, adapter, tmp_path / f"v{n}", rank=4 + n)
    listed = (
        await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions")
    ).json()
    assert [v["number"] for v in listed["items"]] == [3, 2, 1]
    assert [v["rank"] for v in listed["items"]] == [6, 5, 4]


async def test_archived_version_cannot_be_aliased(
    operator: Api, make_tenant, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    await upload_valid(tenant.api, tenant.id, adapter, tmp_path / "v1")
    archived = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions/1/archive"
    )
    assert archived.json()["status"] == "archived"
    response = await tenant.api.put(
        f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases/prod", json={"version": 1}
    )
    assert response.status_code == 409 and "archived" in response.json()["detail"]


async def test_adapter_names_are_unique_per_tenant_only(operator: Api, make_tenant) -> None:
    first, second = await make_tenant(), await make_tenant()
    await ensure_tiny_base(operator)
    await create_adapter(first.api, first.id, "support-bot")
    await create_adapter(second.api, second.id, "support-bot")
    again = await first.api.post(
        f"/api/v1/tenants/{first.id}/adapters",
        json={"name": "support-bot", "base_model": "tiny-llama"},
    )
    assert again.status_code == 409


async def test_unknown_base_model_is_refused(make_tenant) -> None:
    tenant = await make_tenant()
    response = await tenant.api.post(
        f"/api/v1/tenants/{tenant.id}/adapters", json={"name": "x", "base_model": "gpt-9"}
    )
    assert response.status_code == 400 and "gpt-9" in response.json()["detail"]
