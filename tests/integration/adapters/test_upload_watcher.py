"""The upload watcher: a version that became ready is a warm hint once, on the next look."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.serving.live import UploadWatcher
from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_valid


async def test_a_version_that_became_ready_is_named_once_with_its_base_model(
    operator: Api, make_tenant: Any, tmp_path: Path, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await make_tenant()
    base = await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    before = await upload_valid(tenant.api, tenant.id, adapter, tmp_path / "before")
    watcher = UploadWatcher(sessions)
    assert await watcher.ready() == []  # the first look only learns where to start

    version = await upload_valid(tenant.api, tenant.id, adapter, tmp_path / "after")

    # Other versions may become ready meanwhile (the suite's other tenants): only ours counts.
    ours = (base, UUID(version["id"]))
    assert (await watcher.ready()).count(ours) == 1
    later = await watcher.ready()
    assert ours not in later and (base, UUID(before["id"])) not in later  # each named once
