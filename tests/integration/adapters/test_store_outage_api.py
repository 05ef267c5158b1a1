"""A store outage mid-upload leaves no ready version; the reaper removes orphan objects."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from loraplex.api.deps import services_of
from loraplex.app import create_app
from loraplex.control.adapters.reaper import reap
from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import AdapterVersion, VersionStatus
from loraplex.settings import Settings
from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_files, upload_valid
from tests.support.lora_files import write_adapter
from tests.support.s3_server import S3Server


@pytest.fixture
def outage_server():
    with S3Server() as server:
        yield server


async def test_store_outage_mid_upload_leaves_no_ready_version(
    settings: Settings, outage_server: S3Server, make_tenant, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    own = replace(
        settings,
        s3_endpoint_url=outage_server.endpoint_url,
        s3_bucket=f"outage-{secrets.token_hex(3)}",
    )
    app = create_app(own)
    async with AsyncTestClient(app=app) as client:

        def cut_power(params, **_: object) -> None:
            if params["url_path"].endswith("adapter_model.safetensors"):
                outage_server.stop()  # the config object is already written; the weights never arrive

        services_of(app).store._client.meta.events.register("before-call.s3.PutObject", cut_power)
        folder = write_adapter(tmp_path / "a")
        api = Api(client, tenant.api.key)
        response = await upload_files(
            api,
            tenant.id,
            adapter,
            [folder / "adapter_config.json", folder / "adapter_model.safetensors"],
        )
        assert response.status_code == 503, response.text
        assert response.headers.get("retry-after")
        assert "object store" in response.json()["detail"]
        versions = (
            await api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions")
        ).json()["items"]
    assert [v["status"] for v in versions] == ["failed"]
    assert "object store" in versions[0]["error"]


async def test_reaper_deletes_orphans_and_fails_stale_uploads(
    settings: Settings, app, make_tenant, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    kept = await upload_valid(tenant.api, tenant.id, adapter, tmp_path / "v1")
    store = services_of(app).store
    orphan = f"adapters/{tenant.id}/{uuid.uuid4()}/{uuid.uuid4()}/adapter_model.safetensors"
    (tmp_path / "orphan").write_bytes(b"left behind by a crashed upload")
    store.put_file(orphan, tmp_path / "orphan")

    adapter_id = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}")).json()[
        "id"
    ]
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        session.add(
            AdapterVersion(
                adapter_id=uuid.UUID(adapter_id),
                tenant_id=uuid.UUID(tenant.id),
                number=2,
                status=VersionStatus.UPLOADING,
            )
        )
        await session.commit()
        report = await reap(session, store, now=datetime.now(UTC) + timedelta(hours=2))
    await config.get_engine().dispose()
    statuses = {
        v["number"]: v["status"]
        for v in (
            await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions")
        ).json()["items"]
    }
    assert statuses == {1: "ready", 2: "failed"}
    assert report.stale_versions_failed >= 1

    keys = store.list_keys(f"adapters/{tenant.id}/")
    assert orphan not in keys
    assert any(kept["id"] in key for key in keys)  # the ready version's objects stay
    assert report.orphan_objects_deleted >= 1
