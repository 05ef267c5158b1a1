"""Route access rules, checked by one global guard.

Every route declares `opt={"access": ...}`:
- `public`: no key (health, metrics);
- `session`: the browser UI, which checks its own session cookie (loraplex.web.session);
- `operator`: operator keys only; a tenant key gets 403;
- `tenant`: operator keys, or a tenant key holding the route's scope. When the path has a
  `tenant_id`, a key of another tenant gets 404 — the object does not exist for it;
- `agent`: the shared `LORAPLEX_AGENT_TOKEN` (engines registering themselves), no API key.
A route without a declaration is refused, so a new route cannot ship unguarded.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from loraplex.api.deps import services_of
from loraplex.auth.agent_token import check_agent_token
from loraplex.auth.principal import Principal, Scope
from loraplex.errors import Forbidden, NotFound

PUBLIC = {"access": "public"}
SESSION = {"access": "session"}
OPERATOR = {"access": "operator"}
AGENT = {"access": "agent"}


def tenant(scope: str | None = None) -> dict[str, Any]:
    """Route opt for tenant-owned resources; scope defaults to read (GET) or admin (writes)."""
    return {"access": "tenant", "scope": scope}


async def check_access(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """The global guard applying the rules above.

    Async although it never awaits: Litestar runs a plain function guard in a worker thread,
    and that hop on every request cost more than the check itself.
    """
    access = handler.opt.get("access")
    if access in ("public", "session"):
        return
    if access == "agent":
        check_agent_token(connection.headers, services_of(connection.app).settings.agent_token)
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
    _check_tenant_route(connection, handler, principal)


def _check_tenant_route(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler, principal: Principal
) -> None:
    raw_tenant = connection.path_params.get("tenant_id")
    if raw_tenant is not None and not principal.can_see_tenant(_as_uuid(raw_tenant)):
        raise NotFound("tenant not found")
    scope = handler.opt.get("scope") or (
        Scope.READ if connection.scope.get("method") == "GET" else Scope.ADMIN
    )
    if not principal.has_scope(scope):
        raise Forbidden(f"API key lacks the '{scope}' scope")


def _as_uuid(value: Any) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError as exc:
        raise NotFound("tenant not found") from exc
