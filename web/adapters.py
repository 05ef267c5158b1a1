"""The console's adapter actions: versions (upload, archive, download), aliases (point, roll
back, canary, pin, delete); the pages that show them are web/adapter_page.py.

Every change goes through the same service as its `/api/v1` route and answers with the
adapter's card, which htmx swaps in place.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote
from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import FormMultiDict
from litestar.di import Provide
from litestar.response import Stream, Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.api.downloads import stream_version_file
from loraplex.api.multipart import save_multipart, upload_workdir
from loraplex.control.adapters.aliases import KEEP, AliasService, Keep, canary_policy
from loraplex.control.adapters.schemas import AdapterCreate, AliasSet, CanaryAnalysisIn, CanarySet
from loraplex.control.adapters.service import AdapterService
from loraplex.control.adapters.versions import VersionService
from loraplex.control.canary.policy import CanaryPolicy
from loraplex.cpu_pool import CpuPool
from loraplex.db.models import Adapter
from loraplex.settings import Settings
from loraplex.web.adapter_reads import card_context
from loraplex.web.console import provide_tenant_id
from loraplex.web.forms import convert, number
from loraplex.web.session import Viewer

ADAPTER = "/adapters/{name:str}"
VERSION = ADAPTER + "/versions/{number:int}"
ALIAS = ADAPTER + "/aliases/{alias:str}"


async def provide_adapter(tenant_id: UUID, name: str, db_session: AsyncSession) -> Adapter:
    """Dependency `adapter`: the adapter named in the path, looked up within the viewer's
    tenant (another tenant's reads as unknown)."""
    return await AdapterService(session=db_session).named(tenant_id, name)


class AdapterPages(Controller):
    """`/console/adapters/...`: the changes made from an adapter's card."""

    path = "/console"
    dependencies = {
        "tenant_id": Provide(provide_tenant_id, sync_to_thread=False),
        "adapter": Provide(provide_adapter),
        **providers.create_service_dependencies(AliasService, key="aliases"),
        **providers.create_service_dependencies(VersionService, key="versions"),
    }

    @post("/adapters", status_code=201)
    async def create_adapter(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Response[Any]:
        """A new (empty) adapter on a base model; the browser goes to its page."""
        fields = {
            "name": str(form.get("name", "")).strip(),
            "base_model": form.get("base_model", ""),
        }
        data = convert(fields, AdapterCreate)
        await AdapterService(session=db_session).create_adapter(tenant_id, data, editor.actor)
        page = f"/console/adapters/{quote(data.name)}"
        return Response(b"", status_code=201, headers={"HX-Redirect": page})

    @post(ADAPTER + "/versions", status_code=201, request_max_body_size=None)
    async def upload_version(
        self,
        request: Request[Any, Any, Any],
        adapter: Adapter,
        editor: Viewer,
        versions: VersionService,
        db_session: AsyncSession,
        store: ObjectStore,
        settings: Settings,
        cpu_pool: CpuPool,
    ) -> Template:
        """A new version from `adapter_config.json` + `adapter_model.safetensors` or one
        archive, validated and stored as the API's upload does; answers the adapter's card."""
        with upload_workdir(settings.data_dir) as workdir:
            received = workdir / "received"
            received.mkdir()
            files, _ = await save_multipart(request, received, settings.max_upload_bytes)
            await versions.upload(
                adapter, files, workdir, store, settings, editor.actor, cpu=cpu_pool
            )
        return await _card(db_session, adapter, status=201)

    @post(ADAPTER + "/aliases", status_code=200)
    async def point_alias(
        self,
        form: FormMultiDict,
        adapter: Adapter,
        editor: Viewer,
        aliases: AliasService,
        db_session: AsyncSession,
    ) -> Template:
        """Create an alias or promote it to another version."""
        alias = str(form.get("alias", "")).strip()
        version = convert({"version": number(form, "version")}, AliasSet).version
        await aliases.point(adapter, alias, version, editor.actor)
        return await _card(db_session, adapter)

    @post(ALIAS + "/rollback", status_code=200)
    async def rollback_alias(
        self,
        adapter: Adapter,
        alias: str,
        editor: Viewer,
        aliases: AliasService,
        db_session: AsyncSession,
    ) -> Template:
        """Point the alias back at its previous version."""
        await aliases.rollback(adapter, alias, editor.actor)
        return await _card(db_session, adapter)

    @post(ALIAS + "/canary", status_code=200)
    async def set_canary(
        self,
        form: FormMultiDict,
        adapter: Adapter,
        alias: str,
        editor: Viewer,
        aliases: AliasService,
        db_session: AsyncSession,
    ) -> Template:
        """Send a share of the alias's traffic to another version (weight 0 ends the canary)."""
        raw = {"version": number(form, "version"), "weight": number(form, "weight") or 0}
        data = convert({k: v for k, v in raw.items() if v is not None}, CanarySet)
        analysis = await _analysis_asked(aliases, adapter, alias, "analyse" in form)
        await aliases.set_canary(
            adapter, alias, data.version, data.weight, editor.actor, analysis=analysis
        )
        return await _card(db_session, adapter)

    @post(VERSION + "/archive", status_code=200)
    async def archive_version(
        self,
        adapter: Adapter,
        number: int,
        editor: Viewer,
        versions: VersionService,
        db_session: AsyncSession,
    ) -> Template:
        """Retire a version: it can no longer be served or aliased (its files stay stored)."""
        await versions.archive(adapter, number, editor.actor)
        return await _card(db_session, adapter)

    @get(VERSION + "/files/{filename:str}")
    async def version_file(
        self,
        adapter: Adapter,
        number: int,
        filename: str,
        versions: VersionService,
        store: ObjectStore,
    ) -> Stream:
        """Download one file of a stored version (members may too: reading is looking)."""
        return await stream_version_file(versions, adapter, number, filename, store)

    @post(ALIAS + "/pin", status_code=200)
    async def pin_alias(
        self,
        form: FormMultiDict,
        adapter: Adapter,
        alias: str,
        editor: Viewer,
        aliases: AliasService,
        db_session: AsyncSession,
    ) -> Template:
        """Keep the alias's versions resident on engines (`pinned=true`), or let them be
        evicted again (`pinned=false`); pins count against the plan's `pinned_adapters`."""
        if form.get("pinned") == "true":
            await aliases.pin(adapter, alias, editor.actor)
        else:
            await aliases.unpin(adapter, alias, editor.actor)
        return await _card(db_session, adapter)

    @post(ALIAS + "/delete", status_code=200)
    async def delete_alias(
        self,
        adapter: Adapter,
        alias: str,
        editor: Viewer,
        aliases: AliasService,
        db_session: AsyncSession,
    ) -> Template:
        """Delete an alias; `<adapter>@<alias>` stops resolving."""
        await aliases.remove(adapter, alias, editor.actor)
        return await _card(db_session, adapter)


async def _card(session: AsyncSession, adapter: Adapter, status: int = 200) -> Template:
    context = await card_context(session, adapter)
    return Template("console/_adapter.html", context=context, status_code=status)


async def _analysis_asked(
    aliases: AliasService, adapter: Adapter, alias: str, switched_on: bool
) -> CanaryPolicy | Keep | None:
    """The canary form's switch: on keeps the alias's analysis policy (the defaults where it
    has none, docs/design.md), off leaves the canary to a person."""
    if not switched_on:
        return None
    current = (await aliases.named(adapter, alias)).canary_policy
    return KEEP if current else canary_policy(CanaryAnalysisIn())
