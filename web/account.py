"""Your own account: who you are signed in as, your password, your other sessions.

Changing the password, or signing out everywhere else, keeps this session and ends every
other one (see `session_stamp`): the way to sign out a lost laptop.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.auth.passwords import password_matches
from loraplex.control.users.service import UserService
from loraplex.db.models import User
from loraplex.errors import InvalidInput, TooManyRequests
from loraplex.web.session import SignInRequired, Viewer, start_session


class AccountController(Controller):
    """`/account` for anyone signed in, tenant users and operators alike."""

    path = "/account"

    @get("/", name="web.account")
    async def page(self, viewer: Viewer) -> Template:
        """Who you are, and the change-password form."""
        return Template("account.html", context={"me": viewer, "saved": ""})

    @post("/password", status_code=200)
    async def change_password(
        self,
        request: Request[Any, Any, Any],
        form: FormMultiDict,
        viewer: Viewer,
        db_session: AsyncSession,
    ) -> Template:
        """Check the current password (attempts count as sign-ins do), set the new one, and
        carry on in a fresh session; sessions elsewhere end."""
        current, new = str(form.get("current", "")), str(form.get("new", ""))
        services = services_of(request.app)
        if not await services.sign_in_throttle.allow_request(request, viewer.email):
            raise TooManyRequests("too many password attempts; wait a minute and try again")
        user = await _me(db_session, viewer)
        if not await password_matches(user.password_hash, current, services.password_pool):
            raise InvalidInput("the current password is wrong", param="current")
        if new != str(form.get("confirm", "")):
            raise InvalidInput("the new password and its confirmation differ", param="confirm")
        if new == current:
            raise InvalidInput("the new password is the current one", param="new")
        await UserService(session=db_session).set_password(user, new, viewer.actor)
        start_session(request, user)
        saved = "Password changed. Your other sessions are signed out."
        return Template("_account_form.html", context={"saved": saved})

    @post("/sessions/end", status_code=200)
    async def end_other_sessions(
        self, request: Request[Any, Any, Any], viewer: Viewer, db_session: AsyncSession
    ) -> Template:
        """Sign out everywhere else (a lost laptop, a shared computer); this session goes on."""
        user = await _me(db_session, viewer)
        await UserService(session=db_session).end_sessions(user, viewer.actor)
        start_session(request, user)
        return Template("_sessions_form.html", context={"ended": True})


async def _me(session: AsyncSession, viewer: Viewer) -> User:
    """The signed-in user's row (`provide_viewer` loaded it already: the session's identity map
    answers without a query)."""
    user = await session.get(User, viewer.user_id)
    if user is None:  # deleted between the two lookups of this request
        raise SignInRequired("sign in to use the console")
    return user
