"""Liveness, readiness, the dependencies' state, and who-am-I.

Three probes, three questions. `/healthz` (liveness): does this process answer? A failure
restarts it. `/readyz` (readiness): should this process get requests? Yes whenever it
answers, whatever PostgreSQL and Redis do: they are shared by every replica, so failing
readiness on their blip would take every replica out of the Service at once, and clients
would get connection errors instead of the documented answers (503 `service_unavailable`
with Retry-After, 503 `rate_limiter_unavailable`, or admission without limits under
`LORAPLEX_RATELIMIT_FAIL_MODE=open`). It still reports both, and says `degraded`.
`/readyz/dependencies`: are PostgreSQL and Redis answering? 503 naming the one that does
not, for dashboards, smoke tests and start-up ordering (Compose's healthcheck).
"""

from __future__ import annotations

import asyncio

from litestar import Controller, Response, get
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.schemas import Output
from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.settings import Settings

# Each check answers within this, so a probe (3 s timeout in the manifests) never times out
# on a dependency that hangs rather than refuses.
CHECK_TIMEOUT_S = 1.0
HEALTHY = frozenset({"ok", "embedded"})


async def dependency_checks(
    db_session: AsyncSession, redis: Redis, settings: Settings
) -> dict[str, str]:
    """`database` and `redis`: "ok" (Redis: "embedded" for the stand-in) or "error: <type>"."""
    checks = {"database": "ok", "redis": "ok"}
    try:
        await asyncio.wait_for(db_session.execute(text("SELECT 1")), CHECK_TIMEOUT_S)
    except Exception as exc:  # any driver error or the timeout means "not answering"
        checks["database"] = f"error: {type(exc).__name__}"
    try:  # the real Redis, or in embedded mode the in-process stand-in
        await asyncio.wait_for(redis.ping(), CHECK_TIMEOUT_S)
        if not settings.redis_url:
            checks["redis"] = "embedded"
    except Exception as exc:  # connection refused, timeout, auth...
        checks["redis"] = f"error: {type(exc).__name__}"
    return checks


class Me(Output):
    """The calling key."""

    key_prefix: str
    tenant_id: str | None
    scopes: list[str]
    operator: bool


class HealthController(Controller):
    """Probes for orchestrators, and the caller's identity."""

    tags = ["health"]

    @get("/healthz", operation_id="Healthz", opt=access.PUBLIC, include_in_schema=False)
    async def healthz(self) -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @get("/readyz", operation_id="Readyz", opt=access.PUBLIC, include_in_schema=False)
    async def readyz(
        self, db_session: AsyncSession, redis: Redis, settings: Settings
    ) -> dict[str, str]:
        """200 while the process serves: `ready`, or `degraded` naming what is down."""
        checks = await dependency_checks(db_session, redis, settings)
        degraded = any(value not in HEALTHY for value in checks.values())
        return {"status": "degraded" if degraded else "ready", **checks}

    @get(
        "/readyz/dependencies",
        operation_id="ReadyzDependencies",
        opt=access.PUBLIC,
        include_in_schema=False,
    )
    async def readyz_dependencies(
        self, db_session: AsyncSession, redis: Redis, settings: Settings
    ) -> Response[dict[str, str]]:
        """The database and Redis answer; 503 naming the one that does not."""
        checks = await dependency_checks(db_session, redis, settings)
        ready = all(value in HEALTHY for value in checks.values())
        return Response(
            {"status": "ready" if ready else "not ready", **checks},
            status_code=200 if ready else 503,
        )

    @get("/api/v1/me", operation_id="WhoAmI", opt=access.tenant("read"))
    async def me(self, principal: Principal) -> Me:
        """The key making this request."""
        return Me(
            key_prefix=principal.key_prefix,
            tenant_id=principal.tenant_id and str(principal.tenant_id),
            scopes=sorted(principal.scopes),
            operator=principal.is_operator,
        )
