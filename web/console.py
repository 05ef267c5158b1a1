"""The tenant console: overview (usage against quota), API keys, users, playground.

Pages render whole; forms post with htmx and get back the fragment they replace. Every
change goes through the same service as its `/api/v1` route (validation, quota checks,
audit entries — the actor is `user:<email>`).
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import FormMultiDict
from litestar.di import Provide
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.principal import Scope
from loraplex.control.keys.schemas import KeyCreate
from loraplex.control.keys.service import ApiKeyService
from loraplex.control.users.service import UserCreate, UserService
from loraplex.db.models import UserRole
from loraplex.errors import Forbidden, InvalidInput
from loraplex.gateway.catalogue import model_ids
from loraplex.gateway.http import INFERENCE, Inference
from loraplex.web import reads
from loraplex.web.audit import TYPED_FILTERS, audit_page
from loraplex.web.forms import convert
from loraplex.web.paging import PageAsked
from loraplex.web.session import Viewer

TENANT_SCOPES = sorted(Scope.TENANT_SCOPES)
MAX_CSV_DAYS = 31  # what one usage report may span
MAX_MODEL_CHARS = 200  # the longest `model` the OpenAI routes accept


def provide_tenant_id(viewer: Viewer) -> UUID:
    """The signed-in user's tenant; operators have none and use the admin UI."""
    if viewer.tenant_id is None:
        raise Forbidden("operators have no tenant console: use /admin")
    return viewer.tenant_id


def api_base(request: Request[Any, Any, Any]) -> str:
    """The OpenAI-compatible API's base URL as this request reached us (`<scheme>://<host>/v1`,
    under the app's root path if it has one): what a client passes as `base_url`."""
    return f"{str(request.base_url).rstrip('/')}/v1"


class ConsoleController(Controller):
    """`/console/...` for the users of one tenant."""

    path = "/console"
    dependencies = {
        "tenant_id": Provide(provide_tenant_id, sync_to_thread=False),
        **INFERENCE,
        **providers.create_service_dependencies(ApiKeyService, key="keys"),
        **providers.create_service_dependencies(UserService, key="users"),
    }

    @get("/", name="console.overview")
    async def overview(
        self, request: Request[Any, Any, Any], tenant_id: UUID, db_session: AsyncSession
    ) -> Template:
        """How to call the tenant's adapters from code, usage against quota, and tokens per
        hour over the last day."""
        context = {
            "o": await reads.overview(db_session, tenant_id),
            "start": await reads.get_started(db_session, tenant_id),
            "starter": await reads.starter_tune(db_session, tenant_id),
            "api_base": api_base(request),
        }
        return Template("console/overview.html", context=context)

    @get("/usage.csv", name="console.usage_csv")
    async def usage_csv(
        self, tenant_id: UUID, db_session: AsyncSession, days: str = "30"
    ) -> Response[bytes]:
        """The last `days` (1 to 31) of usage per UTC day and model id, as CSV (for billing
        and spreadsheets; `GET /api/v1/usage` has the same as JSON)."""
        if not re.fullmatch(r"[0-9]{1,3}", days) or not 1 <= int(days) <= MAX_CSV_DAYS:
            raise InvalidInput(
                f"days must be a whole number from 1 to {MAX_CSV_DAYS}", param="days"
            )
        body = await reads.usage_csv(db_session, tenant_id, int(days))
        filename = f"loraplex-usage-{days}d.csv"
        return Response(
            body,
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": f'attachment; filename="{filename}"'},
        )

    @get("/audit", name="console.audit", dependencies=TYPED_FILTERS)
    async def audit(
        self,
        tenant_id: UUID,
        db_session: AsyncSession,
        typed: dict[str, str],
        page_asked: PageAsked = "",
    ) -> Template:
        """The tenant's own audit log (who changed what, when), filtered and paged as the
        operators' is; `GET /api/v1/tenants/{id}/audit` has the same as JSON."""
        return await audit_page(db_session, "console/audit.html", typed, page_asked, tenant_id)

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
        keys: ApiKeyService,
        db_session: AsyncSession,
    ) -> Template:
        """Mint a key; its secret is in this response only."""
        data = convert(
            {"name": form.get("name", "").strip(), "scopes": form.getall("scopes", [])}, KeyCreate
        )
        created = await keys.create_tenant_key(tenant_id, data, editor.actor, editor.user_id)
        return await _keys(db_session, tenant_id, created=created, status=201)

    @post("/keys/{key_id:uuid}/revoke", status_code=200)
    async def revoke_key(
        self,
        tenant_id: UUID,
        key_id: UUID,
        editor: Viewer,
        keys: ApiKeyService,
        db_session: AsyncSession,
    ) -> Template:
        """Revoke a key; it stops working at once, on every replica."""
        await keys.revoke(tenant_id, key_id, editor.actor)
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
        users: UserService,
        db_session: AsyncSession,
    ) -> Template:
        """A new user of the tenant with a first password (argon2), as the users API makes one."""
        fields = {k: str(form.get(k, "")).strip() for k in ("email", "name", "role")}
        data = convert({**fields, "password": str(form.get("password", ""))}, UserCreate)
        await users.create_user(tenant_id, data, editor.actor)
        return await _users(db_session, tenant_id, status=201)

    @post("/users/{user_id:uuid}/remove", status_code=200)
    async def remove_user(
        self,
        tenant_id: UUID,
        user_id: UUID,
        editor: Viewer,
        users: UserService,
        db_session: AsyncSession,
    ) -> Template:
        """Remove a user (not yourself: the tenant would lose its last way in)."""
        if user_id == editor.user_id:
            raise InvalidInput("you cannot remove yourself; ask another tenant admin")
        await users.remove(tenant_id, user_id, editor.actor)
        return await _users(db_session, tenant_id)

    @post("/users/{user_id:uuid}/password", status_code=200)
    async def reset_password(
        self,
        form: FormMultiDict,
        tenant_id: UUID,
        user_id: UUID,
        editor: Viewer,
        users: UserService,
        db_session: AsyncSession,
    ) -> Template:
        """Give a user of the tenant a new password (they forgot theirs); their sessions end."""
        if user_id == editor.user_id:
            raise InvalidInput("change your own password on your account page", param="password")
        user = await users.of_tenant(tenant_id, user_id)
        await users.set_password(user, str(form.get("password", "")), editor.actor)
        return await _users(db_session, tenant_id, saved=f"New password set for {user.email}.")

    @post("/users/{user_id:uuid}/sessions/end", status_code=200)
    async def end_sessions(
        self,
        tenant_id: UUID,
        user_id: UUID,
        editor: Viewer,
        users: UserService,
        db_session: AsyncSession,
    ) -> Template:
        """Sign a user of the tenant out of every browser (their password stays)."""
        user = await users.of_tenant(tenant_id, user_id)
        await users.end_sessions(user, editor.actor)
        return await _users(db_session, tenant_id, saved=f"{user.email} is signed out everywhere.")

    @get("/playground", name="console.playground")
    async def playground_page(
        self,
        tenant_id: UUID,
        db_session: AsyncSession,
        model: str | None = None,
        compare: str | None = None,
    ) -> Template:
        """Chat with a model (base, adapter, alias or version), or with two side by side.
        `?model=A&compare=B` opens compare mode with A and B chosen; a name the list lacks is
        offered anyway (the gateway answers for it, a 404 if it serves no such model)."""
        models = await model_ids(db_session, tenant_id)
        for name in (model, compare):
            if name and len(name) > MAX_MODEL_CHARS:
                raise InvalidInput(f"a model name has at most {MAX_MODEL_CHARS} characters")
            if name and name not in models:
                models.append(name)
        model_a = model or (models[0] if models else "")
        others = [m for m in models if m != model_a]
        model_b = compare or (others[0] if others else model_a)
        context = {
            "models": models,
            "model_a": model_a,
            "model_b": model_b,
            "comparing": bool(compare),
        }
        return Template("console/playground.html", context=context)

    @post("/playground/chat", status_code=200)
    async def playground_chat(
        self, request: Request[Any, Any, Any], tenant_id: UUID, inference: Inference
    ) -> Response[Any]:
        """An OpenAI chat request from the playground, run exactly as `/v1/chat/completions`
        runs it for this tenant: quotas, admission, usage and the SSE stream included."""
        return await inference.run(request, tenant_id, "chat")


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
    session: AsyncSession,
    tenant_id: UUID,
    *,
    page: bool = False,
    status: int = 200,
    saved: str = "",
) -> Template:
    users = await reads.users(session, tenant_id)
    providers = await reads.sign_in_providers(session, tenant_id)
    roles = [UserRole.TENANT_ADMIN, UserRole.TENANT_MEMBER]
    name = "console/users.html" if page else "console/_users.html"
    context = {"users": users, "providers": providers, "roles": roles, "saved": saved}
    return Template(name, context=context, status_code=status)
