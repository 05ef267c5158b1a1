"""Liveness, readiness and who-am-I."""

from __future__ import annotations

from litestar import Controller, Response, get
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.schemas import Output
from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.settings import Settings


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
    ) -> Response[dict[str, str]]:
        """The database and Redis answer; 503 naming the one that does not."""
        checks = {"database": "ok", "redis": "ok"}
        try:
            await db_session.execute(text("SELECT 1"))
        except Exception as exc:  # any driver error means "not ready"
            checks["database"] = f"error: {type(exc).__name__}"
        try:  # the real Redis, or in embedded mode the in-process stand-in
            await redis.ping()
            if not settings.redis_url:
                checks["redis"] = "embedded"
        except Exception as exc:  # connection refused, timeout, auth...
            checks["redis"] = f"error: {type(exc).__name__}"
        ready = all(v in {"ok", "embedded"} for v in checks.values())
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
