"""Turns a finished training run into a served adapter version."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.control.adapters.aliases import AliasService
from loraplex.control.adapters.schemas import AdapterCreate
from loraplex.control.adapters.service import AdapterService
from loraplex.control.adapters.versions import VersionService
from loraplex.db.models import Adapter, BaseModel, FineTuneJob, VersionSource
from loraplex.finetune.ids import JOB, public
from loraplex.settings import Settings


async def register_result(
    session: AsyncSession,
    job: FineTuneJob,
    adapter_dir: Path,
    store: ObjectStore,
    settings: Settings,
) -> tuple[str, UUID]:
    """Validate and store the output as the next version of adapter `<suffix>`; move the alias
    (unless the job is gated: its eval decides).

    Returns the `fine_tuned_model` string (`"<adapter>@v<N>"`) and the version id. The same
    validator as uploads runs here: a trainer bug cannot ship an adapter engines refuse.
    """
    actor = f"job:{public(JOB, job.id)}"
    adapter = (
        await session.execute(
            select(Adapter).where(Adapter.tenant_id == job.tenant_id, Adapter.name == job.suffix)
        )
    ).scalar_one_or_none()
    if adapter is None:
        base = await session.get_one(BaseModel, job.base_model_id)
        adapter = await AdapterService(session=session).create_adapter(
            job.tenant_id,
            AdapterCreate(
                name=job.suffix,
                base_model=base.name,
                description=f"fine-tuned by {public(JOB, job.id)}",
            ),
            actor,
        )
    version = await VersionService(session=session).add_from_folder(
        adapter, adapter_dir, store, settings, actor, source=VersionSource.FINE_TUNE, job_id=job.id
    )
    if job.alias and not job.eval_gate:  # a gated job's alias moves after its eval (eval_gate.py)
        await AliasService(session=session).point(adapter, job.alias, version.number, actor)
    return f"{adapter.name}@v{version.number}", version.id
