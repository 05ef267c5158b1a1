"""Signing in to the console through an identity provider (OpenID Connect, `SsoService`).

`GET /login/sso/{name}` sends the browser to the provider; the provider sends it back to
`GET /login/sso/{name}/callback`, which signs the user in. The browser's session cookie
carries a random binding from the first request to the second, so a callback is accepted
only in the browser that began the sign-in (`auth/sso/pending.py`).
"""

from __future__ import annotations

import secrets
from typing import Any

from litestar import Controller, Request, get
from litestar.response import Redirect
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.errors import TooManyRequests
from loraplex.web.session import start_session

SESSION_BINDING = "sso_bind"
MAX_QUERY_VALUE_CHARS = 4096


class SsoController(Controller):
    """The two legs of a sign-in through a provider."""

    path = "/login/sso"

    @get("/{name:str}", name="web.sso.start")
    async def start(self, request: Request[Any, Any, Any], name: str) -> Redirect:
        """Send the browser to provider `name`'s sign-in page. Each start stores a pending
        sign-in for ten minutes, so starts count as sign-in attempts: per browser and per
        client address (never per provider alone, which one office behind a NAT shares)."""
        services = services_of(request.app)
        binding = request.session.get(SESSION_BINDING) or secrets.token_urlsafe(24)
        if not await services.sign_in_throttle.allow_request(request, f"sso:{binding}"):
            raise TooManyRequests("too many sign-in attempts; wait a minute and try again")
        request.set_session({**request.session, SESSION_BINDING: binding})
        url = await services.sso.begin(name, binding, _redirect_uri(request, name))
        return Redirect(url, status_code=302)

    @get("/{name:str}/callback", name="web.sso.callback")
    async def callback(
        self, request: Request[Any, Any, Any], name: str, db_session: AsyncSession
    ) -> Redirect:
        """Finish the sign-in the provider vouched for, and open the console."""
        query = {k: v for k, v in request.query_params.items() if len(v) <= MAX_QUERY_VALUE_CHARS}
        binding = str(request.session.get(SESSION_BINDING, ""))
        signed_in = await services_of(request.app).sso.complete(db_session, name, binding, query)
        viewer = start_session(request, signed_in.user, signed_in.session)
        return Redirect(viewer.home, status_code=303)


def _redirect_uri(request: Request[Any, Any, Any], name: str) -> str:
    base = services_of(request.app).settings.public_url or str(request.base_url)
    return f"{base.rstrip('/')}/login/sso/{name}/callback"
