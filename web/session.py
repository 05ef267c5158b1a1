"""Who is signed in to the console, and how they sign in.

A browser session holds the user's id and a stamp of their password hash and session epoch
(in Litestar's encrypted session cookie); every request reloads the user, so a deactivated
user or a changed role takes effect at once, and a changed password or "sign out everywhere"
ends every other session of the user.
Sign-in attempts are limited per (email, client address) and per client address
(`sign_in_throttle`); passwords are checked off the event loop (`loraplex.auth.passwords`).
A session begun through an identity provider (`web/sso.py`) also keeps its refresh token and
when the provider last vouched for the user; once that is `oidc_recheck_s` old, the next
request renews it with the provider (`SsoService.renew`), and a user the provider no longer
knows, or whose groups give no role, is signed out and deactivated there and then.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from litestar import Request
from litestar.middleware.session.client_side import (
    ClientSideSessionBackend,
    CookieBackendConfig,
)
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.api.deps import services_of
from loraplex.auth.passwords import password_matches
from loraplex.auth.sso.service import AccessEnded, SsoSession
from loraplex.cpu_pool import CpuPool
from loraplex.db.models import Tenant, TenantStatus, User, UserRole
from loraplex.errors import Forbidden, LoraplexError
from loraplex.settings import Settings

SESSION_USER = "uid"
SESSION_HOME = "home"  # where `/` leads once signed in
SESSION_STAMP = "pw"  # session_stamp(user) when the session began
SESSION_SSO = "sso"  # SsoSession.to_dict() when signed in through an identity provider
SESSION_NOTICE = "notice"  # why a session ended, shown once by the sign-in page


class SignInRequired(LoraplexError):
    """No one is signed in: the console answers with the sign-in page."""

    status_code = 401
    code = "sign_in_required"


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in user, as the console's handlers see them."""

    user_id: UUID
    email: str
    name: str
    role: UserRole
    tenant_id: UUID | None

    @property
    def is_operator(self) -> bool:
        """Operators see the admin UI and every tenant."""
        return self.role == UserRole.OPERATOR

    @property
    def can_change(self) -> bool:
        """Tenant admins (and operators) change things; members only look."""
        return self.role in (UserRole.OPERATOR, UserRole.TENANT_ADMIN)

    @property
    def actor(self) -> str:
        """How the audit log names this user."""
        return f"user:{self.email}"

    @property
    def home(self) -> str:
        """Where signing in leads."""
        return "/admin" if self.is_operator else "/console"


class _CookieBackend(ClientSideSessionBackend):
    """Litestar's encrypted-cookie backend, shared rather than copied: Litestar deep-copies a
    router's middleware when it registers the router, and the backend's AES-GCM cipher (which
    never changes) cannot be copied."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _CookieBackend:
        return self


class _CookieConfig(CookieBackendConfig):
    _backend_class = _CookieBackend


def session_config(settings: Settings) -> CookieBackendConfig:
    """Encrypted, HTTP-only session cookie keyed from `LORAPLEX_SECRET_KEY`."""
    return _CookieConfig(
        secret=hashlib.sha256(settings.secret_key.encode()).digest(),
        key="loraplex_session",
        max_age=8 * 3600,
        httponly=True,
        samesite="lax",
        secure=settings.cookies_secure,
    )


async def sign_in(
    session: AsyncSession, email: str, password: str, pool: CpuPool | None = None
) -> User | None:
    """The user with this email and password, if active; None otherwise. The password is
    checked in `pool`'s worker (else a thread), and as slowly for an unknown email
    (`password_matches`)."""
    user = await session.scalar(select(User).where(User.email == email.strip().lower()))
    matches = await password_matches(user.password_hash if user else None, password, pool)
    if user is None or not user.is_active or not matches:
        return None
    return user


def session_stamp(user: User) -> str:
    """A short digest of the user's password hash and session epoch. A session keeps the stamp
    it began with, so a new password (a new argon2 hash, new salt) or a raised epoch ("sign
    out everywhere") ends every older session."""
    seed = f"{user.password_hash or ''}|{user.session_epoch or 0}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


def start_session(
    request: Request[Any, Any, Any], user: User, sso: SsoSession | None = None
) -> Viewer:
    """A new session for `user` in this request's cookie (a fresh one: no earlier state kept);
    `sso` when the user signed in through an identity provider."""
    viewer = _viewer(user)
    request.clear_session()
    data: dict[str, Any] = {
        SESSION_USER: str(user.id),
        SESSION_HOME: viewer.home,
        SESSION_STAMP: session_stamp(user),
    }
    if sso is not None:
        data[SESSION_SSO] = sso.to_dict()
    request.set_session(data)
    return viewer


async def provide_viewer(request: Request[Any, Any, Any], db_session: AsyncSession) -> Viewer:
    """The signed-in user (dependency `viewer`); SignInRequired when there is none, or when the
    user's password changed since this session began."""
    raw = request.session.get(SESSION_USER) if request.session else None
    user = await db_session.get(User, UUID(raw)) if raw else None
    if user is None or not user.is_active:
        raise SignInRequired("sign in to use the console")
    if request.session.get(SESSION_STAMP) != session_stamp(user):
        request.clear_session()
        raise SignInRequired("this session was ended: sign in again")
    if SESSION_SSO in request.session:
        await _renew_sso(request, user, db_session)
    if user.tenant_id is not None:  # as the tenant's keys are, its users are shut out too
        tenant = await db_session.get(Tenant, user.tenant_id)
        if tenant is None or tenant.status != TenantStatus.ACTIVE:
            status = tenant.status if tenant else "deleted"
            raise Forbidden(f"this organisation is {status}; ask your Loraplex operator")
    viewer = _viewer(user)
    request.state.viewer = viewer  # the page header shows who is signed in
    return viewer


async def _renew_sso(request: Request[Any, Any, Any], user: User, db_session: AsyncSession) -> None:
    """Ask the user's identity provider again when the session's last check is due."""
    current = SsoSession.from_dict(request.session[SESSION_SSO])
    try:
        renewed = await services_of(request.app).sso.renew(db_session, user, current)
    except AccessEnded as exc:
        request.clear_session()
        request.set_session({SESSION_NOTICE: exc.detail})
        raise SignInRequired(exc.detail) from exc
    if renewed is not current:
        request.set_session({**request.session, SESSION_SSO: renewed.to_dict()})


def provide_editor(viewer: Viewer) -> Viewer:
    """Dependency `editor`: the signed-in user, who must be allowed to change things (tenant
    admins and operators); tenant members may look but not change."""
    if not viewer.can_change:
        raise Forbidden("your role can view this page but not change it; ask a tenant admin")
    return viewer


def provide_operator(viewer: Viewer) -> Viewer:
    """Dependency `operator`: the signed-in user, who must be an operator (the admin UI)."""
    if not viewer.is_operator:
        raise Forbidden("the admin UI is for operators")
    return viewer


def _viewer(user: User) -> Viewer:
    return Viewer(user.id, user.email, user.name, UserRole(user.role), user.tenant_id)
