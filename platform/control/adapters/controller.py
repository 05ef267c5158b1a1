"""HTTP routes for a tenant's adapters, versions and aliases."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, Request, delete, get, post, put
from litestar.di import Provide
from litestar.response import Response, Stream

from loraplex.adapters.store import ObjectStore
from loraplex.api.downloads import stream_version_file
from loraplex.api.multipart import save_multipart, upload_workdir
from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.adapters.aliases import AliasService, canary_policy
from loraplex.control.adapters.import_schemas import ImportOut
from loraplex.control.adapters.imports import ImportService, is_json, read_import_request
from loraplex.control.adapters.schemas import (
    AdapterCreate,
    AdapterOut,
    AliasOut,
    AliasSet,
    CanarySet,
    DownloadOut,
    VersionOut,
)
from loraplex.control.adapters.service import AdapterService
from loraplex.control.adapters.versions import VersionService
from loraplex.cpu_pool import CpuPool
from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion
from loraplex.finetune.queue import JobQueue
from loraplex.settings import Settings

ADAPTERS = "/api/v1/tenants/{tenant_id:uuid}/adapters"
ADAPTER = ADAPTERS + "/{adapter:str}"
VERSION = ADAPTER + "/versions/{number:int}"
ALIAS = ADAPTER + "/aliases/{alias:str}"


async def provide_adapter(tenant_id: UUID, adapter: str, adapters: AdapterService) -> Adapter:
    """The adapter named in the path, looked up within the path's tenant."""
    return await adapters.named(tenant_id, adapter)


class AdapterController(Controller):
    """Adapters, their versions (upload, archive, download) and aliases."""

    tags = ["adapters"]
    dependencies = {
        **providers.create_service_dependencies(AdapterService, key="adapters"),
        **providers.create_service_dependencies(VersionService, key="versions"),
        **providers.create_service_dependencies(AliasService, key="aliases"),
        **providers.create_service_dependencies(ImportService, key="imports"),
        "target": Provide(provide_adapter),
    }

    @post(ADAPTERS, operation_id="CreateAdapter", opt=access.tenant())
    async def create_adapter(
        self, tenant_id: UUID, data: AdapterCreate, adapters: AdapterService, principal: Principal
    ) -> AdapterOut:
        """Create an adapter on a base model."""
        return adapters.to_out(await adapters.create_adapter(tenant_id, data, principal.actor))

    @get(ADAPTERS, operation_id="ListAdapters", opt=access.tenant())
    async def list_adapters(
        self, tenant_id: UUID, adapters: AdapterService, page: LimitOffset
    ) -> OffsetPagination[AdapterOut]:
        """The tenant's adapters."""
        items, total = await adapters.get_many_and_count(
            page, OrderBy("name", "asc"), Adapter.tenant_id == tenant_id
        )
        return OffsetPagination([adapters.to_out(a) for a in items], page.limit, page.offset, total)

    @get(ADAPTER, operation_id="GetAdapter", opt=access.tenant())
    async def get_adapter(self, target: Adapter, adapters: AdapterService) -> AdapterOut:
        """One adapter."""
        return adapters.to_out(target)

    @post(
        ADAPTER + "/versions",
        operation_id="UploadAdapterVersion",
        opt=access.tenant(),
        request_max_body_size=None,
    )
    async def upload_version(
        self,
        request: Request[Any, Any, Any],
        target: Adapter,
        versions: VersionService,
        store: ObjectStore,
        settings: Settings,
        principal: Principal,
        cpu_pool: CpuPool,
        imports: ImportService,
        job_queue: JobQueue,
    ) -> Response[VersionOut | ImportOut]:
        """Upload a version: `adapter_config.json` + `adapter_model.safetensors`, or one
        archive (201); or, as JSON, import it from a source (202 with the import job)."""
        if is_json(request):
            data = await read_import_request(request)
            job = await imports.start(target, data, principal.actor, job_queue, settings)
            return Response(await imports.to_out(target, job), status_code=202)
        with upload_workdir(settings.data_dir) as workdir:
            received = workdir / "received"
            received.mkdir()
            files, _ = await save_multipart(request, received, settings.max_upload_bytes)
            version = await versions.upload(
                target, files, workdir, store, settings, principal.actor, cpu=cpu_pool
            )
        return Response(versions.to_out(target, version), status_code=201)

    @get(
        ADAPTER + "/imports/{import_id:uuid}", operation_id="GetAdapterImport", opt=access.tenant()
    )
    async def get_import(
        self, target: Adapter, import_id: UUID, imports: ImportService
    ) -> ImportOut:
        """An import job: its status, progress events, and the version it made or its error."""
        return await imports.to_out(target, await imports.of_adapter(target, import_id))

    @get(ADAPTER + "/versions", operation_id="ListAdapterVersions", opt=access.tenant())
    async def list_versions(
        self, target: Adapter, versions: VersionService, page: LimitOffset
    ) -> OffsetPagination[VersionOut]:
        """The adapter's versions, newest first."""
        items, total = await versions.get_many_and_count(
            page, OrderBy("number", "desc"), AdapterVersion.adapter_id == target.id
        )
        return OffsetPagination(
            [versions.to_out(target, v) for v in items], page.limit, page.offset, total
        )

    @get(VERSION, operation_id="GetAdapterVersion", opt=access.tenant())
    async def get_version(
        self, target: Adapter, number: int, versions: VersionService
    ) -> VersionOut:
        """One version."""
        return versions.to_out(target, await versions.numbered(target, number))

    @post(
        VERSION + "/archive",
        operation_id="ArchiveAdapterVersion",
        opt=access.tenant(),
        status_code=200,
    )
    async def archive_version(
        self, target: Adapter, number: int, versions: VersionService, principal: Principal
    ) -> VersionOut:
        """Archive a version: it can no longer be served or aliased."""
        return versions.to_out(target, await versions.archive(target, number, principal.actor))

    @get(VERSION + "/download", operation_id="DownloadAdapterVersion", opt=access.tenant())
    async def download_version(
        self,
        request: Request[Any, Any, Any],
        target: Adapter,
        number: int,
        versions: VersionService,
        store: ObjectStore,
        settings: Settings,
    ) -> DownloadOut:
        """URLs (presigned on S3) for the version's files, with their sha256."""
        file_url = str(request.url).split("?")[0].rsplit("/download", 1)[0] + "/files"
        return await versions.download(target, number, store, file_url, settings.download_url_ttl_s)

    @get(
        VERSION + "/files/{filename:str}", operation_id="GetAdapterVersionFile", opt=access.tenant()
    )
    async def version_file(
        self,
        target: Adapter,
        number: int,
        filename: str,
        versions: VersionService,
        store: ObjectStore,
    ) -> Stream:
        """Stream one file of a stored version from the object store."""
        return await stream_version_file(versions, target, number, filename, store)

    @get(ADAPTER + "/aliases", operation_id="ListAdapterAliases", opt=access.tenant())
    async def list_aliases(self, target: Adapter, aliases: AliasService) -> list[AliasOut]:
        """The adapter's aliases."""
        rows = await aliases.get_many(AdapterAlias.adapter_id == target.id, OrderBy("name", "asc"))
        return [await aliases.to_out(a) for a in rows]

    @get(ALIAS, operation_id="GetAdapterAlias", opt=access.tenant())
    async def get_alias(self, target: Adapter, alias: str, aliases: AliasService) -> AliasOut:
        """One alias."""
        return await aliases.to_out(await aliases.named(target, alias))

    @put(ALIAS, operation_id="SetAdapterAlias", opt=access.tenant())
    async def set_alias(
        self,
        target: Adapter,
        alias: str,
        data: AliasSet,
        aliases: AliasService,
        principal: Principal,
    ) -> AliasOut:
        """Point an alias at a ready version (promote)."""
        return await aliases.to_out(
            await aliases.point(target, alias, data.version, principal.actor)
        )

    @post(
        ALIAS + "/rollback",
        operation_id="RollbackAdapterAlias",
        opt=access.tenant(),
        status_code=200,
    )
    async def rollback_alias(
        self, target: Adapter, alias: str, aliases: AliasService, principal: Principal
    ) -> AliasOut:
        """Point the alias back at its previous version."""
        return await aliases.to_out(await aliases.rollback(target, alias, principal.actor))

    @put(ALIAS + "/canary", operation_id="SetAdapterCanary", opt=access.tenant())
    async def set_canary(
        self,
        target: Adapter,
        alias: str,
        data: CanarySet,
        aliases: AliasService,
        principal: Principal,
    ) -> AliasOut:
        """Send a share of the alias's traffic to a canary version (weight 0 ends it)."""
        analysis = None if data.analysis is None else canary_policy(data.analysis)
        updated = await aliases.set_canary(
            target, alias, data.version, data.weight, principal.actor, analysis=analysis
        )
        return await aliases.to_out(updated)

    @put(ALIAS + "/pin", operation_id="PinAdapterAlias", opt=access.tenant())
    async def pin_alias(
        self, target: Adapter, alias: str, aliases: AliasService, principal: Principal
    ) -> AliasOut:
        """Keep the alias's version (and canary) resident on engines, within the plan's pins."""
        return await aliases.to_out(await aliases.pin(target, alias, principal.actor))

    @delete(ALIAS + "/pin", operation_id="UnpinAdapterAlias", opt=access.tenant(), status_code=200)
    async def unpin_alias(
        self, target: Adapter, alias: str, aliases: AliasService, principal: Principal
    ) -> AliasOut:
        """Let the alias's versions be evicted again."""
        return await aliases.to_out(await aliases.unpin(target, alias, principal.actor))

    @delete(ALIAS, operation_id="DeleteAdapterAlias", opt=access.tenant())
    async def delete_alias(
        self, target: Adapter, alias: str, aliases: AliasService, principal: Principal
    ) -> None:
        """Delete an alias."""
        await aliases.remove(target, alias, principal.actor)
