"""Quotas counted under the tenant's row lock: requests sent at once never pass a limit
together (real PostgreSQL, the API's own services, in one event loop)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.adapters.store import LocalStore
from loraplex.control.adapters.schemas import AdapterCreate
from loraplex.control.adapters.service import AdapterService
from loraplex.errors import QuotaExceeded
from loraplex.finetune.files import FileService
from tests.conftest import Api
from tests.support.adapter_api import ensure_tiny_base

LIMIT = 3


async def test_adapters_created_at_once_never_pass_the_plans_count(
    make_tenant: Any, operator: Api, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await make_tenant(plan="pro")
    quota = {"overrides": {"max_adapters": LIMIT}}
    assert (await operator.put(f"/api/v1/tenants/{tenant.id}/quota", json=quota)).status_code == 200
    base = await ensure_tiny_base(operator)

    async def create(index: int) -> str:
        async with sessions() as session:
            data = AdapterCreate(name=f"race-{index}", base_model=base)
            try:
                await AdapterService(session=session).create_adapter(UUID(tenant.id), data, "test")
            except QuotaExceeded:
                return "refused"
            await session.commit()
            return "created"

    outcomes = await asyncio.gather(*(create(i) for i in range(8)))
    assert sorted(outcomes) == ["created"] * LIMIT + ["refused"] * (8 - LIMIT)
    listed = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters")
    assert listed.json()["total"] == LIMIT


async def test_training_files_uploaded_at_once_never_pass_the_plans_storage(
    make_tenant: Any,
    operator: Api,
    sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> None:
    paths = []
    for index in range(6):  # six different files of one size: room for two
        turns = [
            {"role": "user", "content": f"hi {index:04d}"},
            {"role": "assistant", "content": "yo"},
        ]
        path = tmp_path / f"train-{index}.jsonl"
        path.write_text(json.dumps({"messages": turns}) + "\n")
        paths.append(path)
    size = paths[0].stat().st_size
    tenant = await make_tenant(plan="pro")
    quota = {"overrides": {"max_storage_bytes": 2 * size + size // 2}}
    assert (await operator.put(f"/api/v1/tenants/{tenant.id}/quota", json=quota)).status_code == 200
    store = LocalStore(tmp_path / "objects")

    async def upload(path: Path) -> str:
        async with sessions() as session:
            try:
                await FileService(session, store).upload(
                    UUID(tenant.id), "fine-tune", path, path.name, 10**6, "test"
                )
            except QuotaExceeded:
                return "refused"
            await session.commit()
            return "stored"

    outcomes = await asyncio.gather(*(upload(p) for p in paths))
    assert sorted(outcomes) == ["refused"] * 4 + ["stored"] * 2
    listed = await tenant.api.get("/v1/files")
    assert len(listed.json()["data"]) == 2
