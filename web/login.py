"""Signing in and out of the console."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.web.session import SESSION_HOME, sign_in, start_session


class LoginController(Controller):
    """`/login` and `/logout`; `/` leads to wherever the visitor belongs."""

    @get("/", name="web.home")
    async def home(self, request: Request[Any, Any, Any]) -> Redirect:
        """The console (or, for operators, the admin UI) when signed in, else the sign-in page."""
        return Redirect(request.session.get(SESSION_HOME, "/login"))

    @get("/login", name="web.login")
    async def login_page(self) -> Template:
        """The sign-in form."""
        return Template("login.html", context={"email": "", "error": ""})

    @post("/login", status_code=303)
    async def login(self, request: Request[Any, Any, Any], db_session: AsyncSession) -> Any:
        """Check the password (argon2); a wrong one and an unknown email read the same."""
        form = await request.form()
        email, password = str(form.get("email", "")), str(form.get("password", ""))
        throttle = services_of(request.app).sign_in_throttle
        if not await throttle.allow_request(request, email):
            return _form(email, "Too many sign-in attempts. Wait a minute and try again.", 429)
        user = await sign_in(db_session, email, password)
        if user is None:
            return _form(email, "Wrong email or password.", 401)
        viewer = start_session(request, user)
        return Redirect(viewer.home, status_code=303)

    @post("/logout", status_code=303)
    async def logout(self, request: Request[Any, Any, Any]) -> Redirect:
        """End the session."""
        request.clear_session()
        return Redirect("/login", status_code=303)


def _form(email: str, error: str, status: int) -> Template:
    return Template("login.html", context={"email": email, "error": error}, status_code=status)
