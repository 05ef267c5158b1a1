"""Signing in and out of the console."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.web.session import SESSION_HOME, SESSION_NOTICE, sign_in, start_session


class LoginController(Controller):
    """`/login` and `/logout`; `/` leads to wherever the visitor belongs."""

    @get("/", name="web.home")
    async def home(self, request: Request[Any, Any, Any]) -> Redirect:
        """The console (or, for operators, the admin UI) when signed in, else the sign-in page."""
        return Redirect(request.session.get(SESSION_HOME, "/login"))

    @get("/login", name="web.login")
    async def login_page(self, request: Request[Any, Any, Any]) -> Template:
        """The sign-in form, and a button per identity provider; why the last session
        ended, when it ended at a renewal."""
        notice = request.session.pop(SESSION_NOTICE, "") if request.session else ""
        return _form(request, "", str(notice), 200)

    @post("/login", status_code=303)
    async def login(self, request: Request[Any, Any, Any], db_session: AsyncSession) -> Any:
        """Check the password (argon2); a wrong one and an unknown email read the same."""
        form = await request.form()
        email, password = str(form.get("email", "")), str(form.get("password", ""))
        services = services_of(request.app)
        if not await services.sign_in_throttle.allow_request(request, email):
            return _form(
                request, email, "Too many sign-in attempts. Wait a minute and try again.", 429
            )
        user = await sign_in(db_session, email, password, services.password_pool)
        if user is None:
            return _form(request, email, "Wrong email or password.", 401)
        viewer = start_session(request, user)
        return Redirect(viewer.home, status_code=303)

    @post("/logout", status_code=303)
    async def logout(self, request: Request[Any, Any, Any]) -> Redirect:
        """End the session."""
        request.clear_session()
        return Redirect("/login", status_code=303)


def _form(request: Request[Any, Any, Any], email: str, error: str, status: int) -> Template:
    providers = services_of(request.app).sso.providers
    context = {"email": email, "error": error, "providers": providers}
    return Template("login.html", context=context, status_code=status)
