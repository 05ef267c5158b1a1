"""The tenant console: overview (usage against quota), API keys, adapters, playground.

Pages render whole; forms post with htmx and get back the fragment they replace. Every
change goes through the same service as its `/api/v1` route (validation, quota checks,
audit entries — the actor is `user:<email>`).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import FormMultiDict
from litestar.di import Provide
from litestar.response import Template
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.adapters.store import ObjectStore
from loraplex.api.multipart import save_multipart, upload_workdir
from loraplex.auth.principal import Scope
from loraplex.control.adapters.aliases import AliasService
from loraplex.control.adapters.schemas import AdapterCreate, AliasSet, CanarySet
from loraplex.control.adapters.service import AdapterService
from loraplex.control.adapters.versions import VersionService
from loraplex.control.keys.schemas import KeyCreate
from loraplex.control.keys.service import ApiKeyService
from loraplex.control.users.service import UserCreate, UserService
from loraplex.db.models import Adapter, BaseModel, User, UserRole
from loraplex.errors import Forbidden, InvalidInput
from loraplex.gateway.controller import model_ids, run_inference
from loraplex.settings import Settings
from loraplex.web import reads
from loraplex.web.forms import convert, number
from loraplex.web.session import Viewer

TENANT_SCOPES = sorted(Scope.TENANT_SCOPES)


def provide_tenant_id(viewer: Viewer) -> UUID:
    """The signed-in user's tenant; operators have none and use the admin UI."""
    if viewer.tenant_id is None:
        raise Forbidden("operators have no tenant console: use /admin")
    return viewer.tenant_id


class ConsoleController(Controller):
    """`/console/...` for the users of one tenant."""

    path = "/console"
    dependencies = {"tenant_id": Provide(provide_tenant_id, sync_to_thread=False)}

    @get("/", name="console.overview")
    async def overview(self, tenant_id: UUID, db_session: AsyncSession) -> Template:
        """Usage against quota, and tokens per hour over the last day."""
        return Template(
            "console/overview.html", context={"o": await reads.overview(db_session, tenant_id)}
        )

    @get("/keys", name="console.keys")
    async def keys_page(self, tenant_id: UUID, db_session: AsyncSession) -> Template:
        """The tenant's API keys and a form for a new one."""
        return await _keys(db_session, tenant_id, page=True)

    @post("/keys", status_code=201)
    async def create_key(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Mint a key; its secret is in this response only."""
        data = convert(
            {"name": form.get("name", "").strip(), "scopes": form.getall("scopes", [])}, KeyCreate
        )
        created = await ApiKeyService(session=db_session).create_tenant_key(
            tenant_id, data, editor.actor
        )
        return await _keys(db_session, tenant_id, created=created, status=201)

    @post("/keys/{key_id:uuid}/revoke", status_code=200)
    async def revoke_key(
        self,
        request: Request[Any, Any, Any],
        tenant_id: UUID,
        key_id: UUID,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Revoke a key; it stops working at once on this replica."""
        key = await ApiKeyService(session=db_session).revoke(tenant_id, key_id, editor.actor)
        request.app.state.authenticator.forget(key.prefix)
        return await _keys(db_session, tenant_id)

    @get("/users", name="console.users")
    async def users_page(self, tenant_id: UUID, db_session: AsyncSession) -> Template:
        """Who can sign in to this tenant's console, and a form for one more."""
        return await _users(db_session, tenant_id, page=True)

    @post("/users", status_code=201)
    async def add_user(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """A new user of the tenant with a first password (argon2), as the users API makes one."""
        fields = {k: str(form.get(k, "")).strip() for k in ("email", "name", "role")}
        data = convert({**fields, "password": str(form.get("password", ""))}, UserCreate)
        await UserService(session=db_session).create_user(tenant_id, data, editor.actor)
        return await _users(db_session, tenant_id, status=201)

    @post("/users/{user_id:uuid}/remove", status_code=200)
    async def remove_user(
        self, tenant_id: UUID, user_id: UUID, editor: Viewer, db_session: AsyncSession
    ) -> Template:
        """Remove a user (not yourself: the tenant would lose its last way in)."""
        if user_id == editor.user_id:
            raise InvalidInput("you cannot remove yourself; ask another tenant admin")
        await UserService(session=db_session).remove(tenant_id, user_id, editor.actor)
        return await _users(db_session, tenant_id)

    @get("/playground", name="console.playground")
    async def playground_page(self, tenant_id: UUID, db_session: AsyncSession) -> Template:
        """Pick a model (base, adapter, alias or version), chat, watch the answer stream."""
        models = await model_ids(db_session, tenant_id)
        return Template("console/playground.html", context={"models": models})

    @post("/playground/chat", status_code=200)
    async def playground_chat(
        self, request: Request[Any, Any, Any], tenant_id: UUID
    ) -> Response[Any]:
        """An OpenAI chat request from the playground, run exactly as `/v1/chat/completions`
        runs it for this tenant: quotas, admission, usage and the SSE stream included."""
        return await run_inference(request, tenant_id, "chat")

    @get("/adapters", name="console.adapters")
    async def adapters_page(self, tenant_id: UUID, db_session: AsyncSession) -> Template:
        """Adapters with their versions and aliases."""
        cards = await reads.adapter_cards(db_session, tenant_id)
        bases = (await db_session.scalars(select(BaseModel.name).order_by(BaseModel.name))).all()
        return Template("console/adapters.html", context={"cards": cards, "base_models": bases})

    @post("/adapters", status_code=201)
    async def create_adapter(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Response[Any]:
        """A new (empty) adapter on a base model; the page reloads with its card."""
        fields = {
            "name": str(form.get("name", "")).strip(),
            "base_model": form.get("base_model", ""),
        }
        data = convert(fields, AdapterCreate)
        await AdapterService(session=db_session).create_adapter(tenant_id, data, editor.actor)
        return Response(b"", status_code=201, headers={"HX-Refresh": "true"})

    @post("/adapters/{name:str}/versions", status_code=201, request_max_body_size=None)
    async def upload_version(
        self,
        request: Request[Any, Any, Any],
        tenant_id: UUID,
        name: str,
        editor: Viewer,
        db_session: AsyncSession,
        store: ObjectStore,
        settings: Settings,
    ) -> Template:
        """A new version from `adapter_config.json` + `adapter_model.safetensors` or one
        archive, validated and stored as the API's upload does; answers the adapter's card."""
        adapter = await AdapterService(session=db_session).named(tenant_id, name)
        with upload_workdir(settings.data_dir) as workdir:
            received = workdir / "received"
            received.mkdir()
            files, _ = await save_multipart(request, received, settings.max_upload_bytes)
            await VersionService(session=db_session).upload(
                adapter, files, workdir, store, settings, editor.actor
            )
        return await _card(db_session, adapter, status=201)

    @post("/adapters/{name:str}/aliases", status_code=200)
    async def point_alias(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        name: str,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Create an alias or promote it to another version."""
        alias = str(form.get("alias", "")).strip()
        version = convert({"version": number(form, "version")}, AliasSet).version
        adapter = await AdapterService(session=db_session).named(tenant_id, name)
        await AliasService(session=db_session).point(adapter, alias, version, editor.actor)
        return await _card(db_session, adapter)

    @post("/adapters/{name:str}/aliases/{alias:str}/rollback", status_code=200)
    async def rollback_alias(
        self, tenant_id: UUID, name: str, alias: str, editor: Viewer, db_session: AsyncSession
    ) -> Template:
        """Point the alias back at its previous version."""
        adapter = await AdapterService(session=db_session).named(tenant_id, name)
        await AliasService(session=db_session).rollback(adapter, alias, editor.actor)
        return await _card(db_session, adapter)

    @post("/adapters/{name:str}/aliases/{alias:str}/canary", status_code=200)
    async def set_canary(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        name: str,
        alias: str,
        editor: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Send a share of the alias's traffic to another version (weight 0 ends the canary)."""
        raw = {"version": number(form, "version"), "weight": number(form, "weight") or 0}
        data = convert({k: v for k, v in raw.items() if v is not None}, CanarySet)
        adapter = await AdapterService(session=db_session).named(tenant_id, name)
        await AliasService(session=db_session).set_canary(
            adapter, alias, data.version, data.weight, editor.actor
        )
        return await _card(db_session, adapter)


async def _keys(
    session: AsyncSession,
    tenant_id: UUID,
    *,
    page: bool = False,
    created: Any = None,
    status: int = 200,
) -> Template:
    context = {
        "keys": await reads.keys(session, tenant_id),
        "scopes": TENANT_SCOPES,
        "created": created,
    }
    name = "console/keys.html" if page else "console/_keys.html"
    return Template(name, context=context, status_code=status)


async def _users(
    session: AsyncSession, tenant_id: UUID, *, page: bool = False, status: int = 200
) -> Template:
    users = (
        await session.scalars(select(User).where(User.tenant_id == tenant_id).order_by(User.email))
    ).all()
    roles = [UserRole.TENANT_ADMIN, UserRole.TENANT_MEMBER]
    name = "console/users.html" if page else "console/_users.html"
    return Template(name, context={"users": users, "roles": roles}, status_code=status)


async def _card(session: AsyncSession, adapter: Adapter, status: int = 200) -> Template:
    card = await reads.adapter_card(session, adapter)
    return Template("console/_adapter.html", context={"card": card}, status_code=status)
