"""Adapter versions: upload (validate, store, register), list, archive, download.

An upload is validated completely before anything is written: a refused adapter leaves no
row and no object. Only then is a row written as `uploading` (committed, so it is visible),
the files go to the object store, and the row becomes `ready` — or `failed`, with its
objects deleted, when the store fails mid-way.
"""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import anyio
from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from uuid_utils.compat import uuid7

from loraplex.adapters import (
    AdapterFacts,
    StoreError,
    ValidationLimits,
    facts_from_json,
    unpack_upload,
    validate_adapter_dir,
)
from loraplex.adapters.store import ObjectStore
from loraplex.control.adapters.schemas import DownloadFile, DownloadOut, VersionOut
from loraplex.control.adapters.storage import (
    VERSION_FILES,
    delete_quietly,
    put_version,
    version_prefix,
)
from loraplex.control.audit.service import record
from loraplex.control.tenants.service import limits_of, lock_tenant
from loraplex.cpu_pool import CpuPool, run_check
from loraplex.db.models import (
    Adapter,
    AdapterAlias,
    AdapterVersion,
    Engine,
    VersionSource,
    VersionStatus,
)
from loraplex.errors import Conflict, NotFound, QuotaExceeded, Unavailable
from loraplex.finetune.quota import finetune_bytes
from loraplex.settings import Settings

STORED_STATUSES = (
    VersionStatus.UPLOADING,
    VersionStatus.VALIDATING,
    VersionStatus.READY,
    VersionStatus.ARCHIVED,
)


async def stored_bytes(session: AsyncSession, tenant_id: UUID) -> int:
    """Bytes that count against `max_storage_bytes`: versions, training files, checkpoints."""
    used = await session.scalar(
        select(func.coalesce(func.sum(AdapterVersion.size_bytes), 0)).where(
            AdapterVersion.tenant_id == tenant_id,
            AdapterVersion.status.in_(STORED_STATUSES),
        )
    )
    return int(used or 0) + await finetune_bytes(session, tenant_id)


class VersionService(SQLAlchemyAsyncRepositoryService[AdapterVersion]):
    """Versions of a tenant's adapters."""

    class Repo(SQLAlchemyAsyncRepository[AdapterVersion]):
        """Adapter versions."""

        model_type = AdapterVersion

    repository_type = Repo

    async def numbered(self, adapter: Adapter, number: int) -> AdapterVersion:
        """Version `number` of `adapter`, or 404."""
        version = await self.get_one_or_none(adapter_id=adapter.id, number=number)
        if version is None:
            raise NotFound(f"version {number} of adapter '{adapter.name}' not found")
        return version

    async def upload(
        self,
        adapter: Adapter,
        sources: list[Path],
        workdir: Path,
        store: ObjectStore,
        settings: Settings,
        actor: str,
        cpu: CpuPool | None = None,
        source: VersionSource = VersionSource.UPLOAD,
    ) -> AdapterVersion:
        """Unpack the uploaded (or imported) files and store them as the adapter's next
        version; the unpacking and the checks run in `cpu`'s worker processes."""
        limits = await self.validation_limits(adapter, settings)
        clean = await run_check(cpu, unpack_upload, sources, workdir / "clean", limits.max_bytes)
        return await self.add_from_folder(
            adapter, clean, store, settings, actor, source=source, cpu=cpu
        )

    async def add_from_folder(
        self,
        adapter: Adapter,
        folder: Path,
        store: ObjectStore,
        settings: Settings,
        actor: str,
        *,
        source: VersionSource,
        job_id: UUID | None = None,
        cpu: CpuPool | None = None,
    ) -> AdapterVersion:
        """Validate an adapter folder (an upload or fine-tune output); store it as a version."""
        limits = await self.validation_limits(adapter, settings)
        base = facts_from_json(_facts_json(adapter))
        facts = await run_check(cpu, validate_adapter_dir, folder, base, limits)
        await self._check_storage_quota(adapter.tenant_id, facts.size_bytes)
        version = await self._register(adapter, facts, source, job_id)
        await self._store(version, folder, store, actor)
        return version

    async def validation_limits(self, adapter: Adapter, settings: Settings) -> ValidationLimits:
        """The caps for a new version: plan rank and the largest engine rank class."""
        session = self.repository.session
        plan = await limits_of(session, adapter.tenant_id)
        engine_rank = await session.scalar(
            select(func.max(Engine.max_lora_rank)).where(
                Engine.base_model_id == adapter.base_model_id
            )
        )
        max_rank = min(
            plan.get("max_rank", settings.max_lora_rank), engine_rank or settings.max_lora_rank
        )
        return ValidationLimits(max_rank=max_rank, max_bytes=settings.max_upload_bytes)

    async def _check_storage_quota(self, tenant_id: UUID, new_bytes: int) -> None:
        session = self.repository.session
        limit = (await limits_of(session, tenant_id)).get("max_storage_bytes")
        if limit is None:
            return
        await lock_tenant(session, tenant_id)  # two uploads at once must not both fit
        used = await stored_bytes(session, tenant_id)
        if used + new_bytes > limit:
            raise QuotaExceeded(
                f"storing {new_bytes} more bytes would exceed the plan's {limit} bytes "
                f"({used} used)",
                param="file",
            )

    async def _register(
        self,
        adapter: Adapter,
        facts: AdapterFacts,
        source: VersionSource,
        job_id: UUID | None = None,
    ) -> AdapterVersion:
        session = self.repository.session
        number = (
            await session.scalar(
                select(func.coalesce(func.max(AdapterVersion.number), 0)).where(
                    AdapterVersion.adapter_id == adapter.id
                )
            )
            or 0
        ) + 1
        version_id = uuid7()
        version = AdapterVersion(
            id=version_id,
            adapter_id=adapter.id,
            tenant_id=adapter.tenant_id,
            number=number,
            status=VersionStatus.UPLOADING,
            source=source,
            rank=facts.rank,
            alpha=facts.alpha,
            target_modules=list(facts.target_modules),
            size_bytes=facts.size_bytes,
            sha256=facts.sha256,
            storage_key=version_prefix(adapter.tenant_id, adapter.id, version_id),
            job_id=job_id,
            details={"config_sha256": facts.config_sha256, "tensor_count": facts.tensor_count},
        )
        session.add(version)
        await session.commit()  # visible as `uploading` while the files travel
        return version

    async def _store(
        self, version: AdapterVersion, folder: Path, store: ObjectStore, actor: str
    ) -> None:
        session = self.repository.session
        try:
            stored = await put_version(store, version.storage_key, folder)
        except StoreError as exc:
            version.status, version.error = VersionStatus.FAILED, f"object store failed: {exc}"
            await session.commit()
            await delete_quietly(store, version.storage_key)
            raise Unavailable(
                "the object store is unavailable; the upload was not kept, retry later",
                headers={"Retry-After": "30"},
            ) from exc
        version.status = VersionStatus.READY
        version.details = {
            **version.details,
            "files": {n: {"sha256": s.sha256, "size": s.size} for n, s in stored.items()},
        }
        record(
            session,
            actor,
            "adapter_version.create",
            version,
            tenant_id=version.tenant_id,
            number=version.number,
            sha256=version.sha256,
            rank=version.rank,
        )

    async def archive(self, adapter: Adapter, number: int, actor: str) -> AdapterVersion:
        """Retire a ready version; refused while an alias or canary points at it."""
        version = await self.numbered(adapter, number)
        if version.status == VersionStatus.ARCHIVED:
            return version
        if version.status != VersionStatus.READY:
            raise Conflict(
                f"version {number} is {version.status}, only ready versions can be archived"
            )
        pointing = await self.repository.session.scalar(
            select(AdapterAlias.name)
            .where(
                or_(
                    AdapterAlias.version_id == version.id,
                    AdapterAlias.canary_version_id == version.id,
                )
            )
            .limit(1)
        )
        if pointing:
            raise Conflict(f"alias '{pointing}' points at version {number}; move it first")
        version.status = VersionStatus.ARCHIVED
        record(
            self.repository.session,
            actor,
            "adapter_version.archive",
            version,
            tenant_id=version.tenant_id,
            number=number,
        )
        return version

    async def stored(self, adapter: Adapter, number: int) -> AdapterVersion:
        """A version whose files are in the object store (ready or archived), or 404/409."""
        version = await self.numbered(adapter, number)
        if version.status not in (VersionStatus.READY, VersionStatus.ARCHIVED):
            raise Conflict(f"version {number} is {version.status}; nothing to download")
        return version

    async def download(
        self, adapter: Adapter, number: int, store: ObjectStore, file_url: str, ttl_s: int
    ) -> DownloadOut:
        """Where to fetch a stored version's files: presigned URLs, else the API's own."""
        version = await self.stored(adapter, number)
        recorded = version.details.get("files", {})
        files = []
        for name in VERSION_FILES:
            url = await anyio.to_thread.run_sync(
                store.presigned_url, version.storage_key + name, ttl_s
            )
            files.append(
                DownloadFile(
                    name=name,
                    url=url or f"{file_url}/{name}",
                    sha256=recorded.get(name, {}).get("sha256", ""),
                    size_bytes=recorded.get(name, {}).get("size", 0),
                )
            )
        return DownloadOut(version=number, expires_in=ttl_s, files=files)

    @staticmethod
    def to_out(adapter: Adapter, version: AdapterVersion) -> VersionOut:
        """The API view of a version."""
        return VersionOut(
            id=version.id,
            adapter=adapter.name,
            number=version.number,
            status=version.status,
            source=version.source,
            rank=version.rank,
            alpha=version.alpha,
            target_modules=list(version.target_modules),
            size_bytes=version.size_bytes,
            sha256=version.sha256,
            error=version.error,
            created_at=version.created_at,
        )


def _facts_json(adapter: Adapter) -> dict[str, object]:
    base = adapter.base_model
    return {
        "name": base.name,
        "architecture": base.architecture,
        "hidden_size": base.hidden_size,
        "num_layers": base.num_layers,
        "vocab_size": base.vocab_size,
        "max_context": base.max_context,
        "modules": base.modules,
        "chat_template_sha256": base.chat_template_sha256,
    }
