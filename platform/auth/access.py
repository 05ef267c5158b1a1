"""Route access rules, checked by one global guard.

Every route declares `opt={"access": ...}`:
- `public`: no key (health, metrics);
- `session`: the browser UI, which checks its own session cookie (loraplex.web.session);
- `operator`: operator keys only; a tenant key gets 403;
- `tenant`: operator keys, or a tenant key holding the route's scope. When the path has a
  `tenant_id`, a key of another tenant gets 404 — the object does not exist for it — and so
  does an operator naming no tenant or a deleted one (but its audit trail and usage);
- `agent`: a node credential bound to the engine the path names (engines registering
  themselves, auth/node_credentials.py), no API key.
A route without a declaration is refused, so a new route cannot ship unguarded.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from sqlalchemy import select

from loraplex.api.deps import services_of
from loraplex.auth.node_credentials import authenticate_node
from loraplex.auth.principal import Principal, Scope
from loraplex.db.models import Tenant, TenantStatus
from loraplex.errors import Forbidden, NotFound

PUBLIC = {"access": "public"}
SESSION = {"access": "session"}
OPERATOR = {"access": "operator"}
AGENT = {"access": "agent"}


def tenant(scope: str | None = None, *, after_deletion: bool = False) -> dict[str, Any]:
    """Route opt for tenant-owned resources; scope defaults to read (GET) or admin (writes).
    `after_deletion`: an operator still reads it for a deleted tenant (its audit trail, usage)."""
    return {"access": "tenant", "scope": scope, "after_deletion": after_deletion}


async def check_access(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """The global guard applying the rules above.

    Async: Litestar runs a plain function guard in a worker thread, and that hop on every
    request cost more than the check itself; the agent rule reads the database.
    """
    access = handler.opt.get("access")
    if access in ("public", "session"):
        return
    if access == "agent":
        await _check_node(connection)
        return
    principal = connection.scope.get("user")
    if not isinstance(principal, Principal):
        raise Forbidden("this route requires an API key")
    if access == "operator":
        if not principal.is_operator:
            raise Forbidden("this route requires an operator key")
        return
    if access != "tenant":
        raise Forbidden("route has no access rule")  # fail closed
    await _check_tenant_route(connection, handler, principal)


async def _check_node(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    engine_name = str(connection.path_params.get("name", ""))
    async with services_of(connection.app).sessions() as session:
        await authenticate_node(session, connection.headers, engine_name)


async def _check_tenant_route(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler, principal: Principal
) -> None:
    raw_tenant = connection.path_params.get("tenant_id")
    if raw_tenant is not None:
        tenant_id = _as_uuid(raw_tenant)
        if not principal.can_see_tenant(tenant_id):
            raise NotFound("tenant not found")
        if principal.is_operator:
            await _require_tenant(connection, tenant_id, bool(handler.opt.get("after_deletion")))
    scope = handler.opt.get("scope") or (
        Scope.READ if connection.scope.get("method") == "GET" else Scope.ADMIN
    )
    if not principal.has_scope(scope):
        raise Forbidden(f"API key lacks the '{scope}' scope")


async def _require_tenant(
    connection: ASGIConnection[Any, Any, Any, Any], tenant_id: UUID, after_deletion: bool
) -> None:
    """An operator may name any id: one that is no tenant, or a deleted one, is a 404 naming it
    rather than an empty list of its adapters, keys or users. (A tenant key's tenant is live:
    its keys stop working when it is deleted.)"""
    async with services_of(connection.app).sessions() as session:
        status = await session.scalar(select(Tenant.status).where(Tenant.id == tenant_id))
    if status is None:
        raise NotFound(f"no tenant {tenant_id}", param="tenant_id")
    if status == TenantStatus.DELETED and not after_deletion:
        raise NotFound(f"tenant {tenant_id} is deleted", param="tenant_id")


def _as_uuid(value: Any) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError as exc:
        raise NotFound("tenant not found") from exc
