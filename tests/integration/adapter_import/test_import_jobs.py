"""Imports no worker runs any more are failed by the reaper; a tenant has a few in flight at most."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.db.models import AdapterImport, ImportStatus
from loraplex.settings import Settings
from loraplex.workers.adapter_import import reap_imports
from loraplex.workers.task import TaskContext
from tests.integration.adapter_import.conftest import Importer
from tests.support.adapter_api import create_adapter


async def test_an_import_past_the_task_limit_fails_as_worker_lost(
    importer: Importer, sessions: async_sessionmaker[AsyncSession], settings: Settings
) -> None:
    adapter = (await importer.api.get(importer.versions.rsplit("/versions", 1)[0])).json()
    async with sessions() as session:
        row = AdapterImport(
            tenant_id=UUID(importer.tenant_id),
            adapter_id=UUID(adapter["id"]),
            status=ImportStatus.FETCHING,
            source={"kind": "hub", "repo": "org/name", "revision": "main"},
        )
        session.add(row)
        await session.commit()
        import_id = row.id
    context = TaskContext(settings, sessions, store=None, queue=None)  # type: ignore[arg-type]

    url = f"{importer.versions.rsplit('/versions', 1)[0]}/imports/{import_id}"
    await reap_imports(context, now=datetime.now(UTC) + timedelta(minutes=30))
    assert (await importer.api.get(url)).json()["status"] == "fetching"  # may still be working
    await reap_imports(context, now=datetime.now(UTC) + timedelta(hours=2))

    job = (await importer.api.get(url)).json()
    assert job["status"] == "failed"
    assert job["error"] == {
        "code": "worker_lost",
        "message": "the worker running the import stopped",
    }


async def test_a_tenant_with_four_imports_in_flight_waits_for_one_to_finish(
    importer: Importer, sessions: async_sessionmaker[AsyncSession]
) -> None:
    adapter = (await importer.api.get(importer.versions.rsplit("/versions", 1)[0])).json()
    async with sessions() as session:
        for _ in range(4):
            session.add(
                AdapterImport(
                    tenant_id=UUID(importer.tenant_id),
                    adapter_id=UUID(adapter["id"]),
                    status=ImportStatus.QUEUED,
                    source={"kind": "hub", "repo": "org/name", "revision": "main"},
                )
            )
        await session.commit()

    response = await importer.start({"hub": {"repo": "org/name"}})

    assert response.status_code == 429, response.text
    assert "4 imports are already queued or running" in response.json()["detail"]


async def test_an_import_is_found_only_under_its_own_adapter(importer: Importer) -> None:
    started = await importer.start({"url": "https://169.254.169.254/adapter.tar.gz"})
    other = await create_adapter(importer.api, importer.tenant_id)
    adapters = importer.versions.rsplit("/", 2)[0]

    response = await importer.api.get(f"{adapters}/{other}/imports/{started.json()['id']}")

    assert response.status_code == 404
    await importer.finished(started)
