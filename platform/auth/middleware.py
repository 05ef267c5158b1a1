"""Bearer-key authentication for the API and `/v1` routes."""

from __future__ import annotations

import time

from litestar.connection import ASGIConnection
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult

from loraplex.api.deps import services_of
from loraplex.auth.authenticator import KeyAuthenticator
from loraplex.errors import Unauthenticated


class BearerKeyMiddleware(AbstractAuthenticationMiddleware):
    """Puts the caller's Principal in `request.user`, or answers 401."""

    async def authenticate_request(self, connection: ASGIConnection) -> AuthenticationResult:
        # The first thing the app does with a request: the gateway counts its own share of
        # TTFT from here (loraplex_gateway_overhead_seconds), authentication included.
        connection.state.received_at = time.monotonic()
        header = connection.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("missing bearer API key (Authorization: Bearer <key>)")
        authenticator: KeyAuthenticator = services_of(connection.app).authenticator
        principal = await authenticator.authenticate(token.strip())
        return AuthenticationResult(user=principal, auth=principal)
