"""Who may scrape `/metrics`: Prometheus with `LORAPLEX_METRICS_TOKEN` as a Bearer token.

The series are per tenant (usage, refusals by limit, quota ratios): operators need them,
tenants must not read each other's. With no token set, `/metrics` is open in local mode
(one machine, one person) and refused everywhere else, with the variable to set named.
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from loraplex.errors import Unauthenticated
from loraplex.settings import Settings

Guard = Any  # Litestar's guard: (connection, handler) -> None


def scrape_guard(settings: Settings) -> Guard:
    """A Litestar guard admitting the scrape token (or anyone, in local mode without one)."""
    token, open_locally = settings.metrics_token, settings.is_local

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not token:
            if open_locally:
                return
            raise Unauthenticated(
                "/metrics needs a scrape token outside local mode: set "
                "LORAPLEX_METRICS_TOKEN and send it as `Authorization: Bearer <token>`",
                headers={"WWW-Authenticate": "Bearer"},
            )
        scheme, _, presented = connection.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            presented.strip().encode(), token.encode()
        ):
            raise Unauthenticated(
                "/metrics needs `Authorization: Bearer <LORAPLEX_METRICS_TOKEN>`",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return guard
