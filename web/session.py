"""Who is signed in to the console, and how they sign in.

A browser session holds the user's id and a stamp of their password hash and session epoch
(in Litestar's encrypted session cookie); every request reloads the user, so a deactivated
user or a changed role takes effect at once, and a changed password or "sign out everywhere"
ends every other session of the user.
Sign-in attempts are limited per email and per client address (`limits`, in Redis when the
platform has one, so the limit holds across API replicas).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from litestar import Request
from litestar.middleware.session.client_side import (
    ClientSideSessionBackend,
    CookieBackendConfig,
)
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.users.service import hash_password, verify_password
from loraplex.db.models import Tenant, TenantStatus, User, UserRole
from loraplex.errors import Forbidden, LoraplexError
from loraplex.settings import Settings

SESSION_USER = "uid"
SESSION_HOME = "home"  # where `/` leads once signed in
SESSION_STAMP = "pw"  # session_stamp(user) when the session began


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
        secure=settings.secure_cookies,
    )


async def sign_in(session: AsyncSession, email: str, password: str) -> User | None:
    """The user with this email and password, if active; None otherwise."""
    user = await session.scalar(select(User).where(User.email == email.strip().lower()))
    if user is None or not user.password_hash:
        verify_password(_dummy_hash(), password)  # as slow as a wrong password
        return None
    if not user.is_active or not verify_password(user.password_hash, password):
        return None
    return user


def session_stamp(user: User) -> str:
    """A short digest of the user's password hash and session epoch. A session keeps the stamp
    it began with, so a new password (a new argon2 hash, new salt) or a raised epoch ("sign
    out everywhere") ends every older session."""
    seed = f"{user.password_hash or ''}|{user.session_epoch or 0}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


def start_session(request: Request[Any, Any, Any], user: User) -> Viewer:
    """A new session for `user` in this request's cookie (a fresh one: no earlier state kept)."""
    viewer = _viewer(user)
    request.clear_session()
    request.set_session(
        {
            SESSION_USER: str(user.id),
            SESSION_HOME: viewer.home,
            SESSION_STAMP: session_stamp(user),
        }
    )
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
    if user.tenant_id is not None:  # as the tenant's keys are, its users are shut out too
        tenant = await db_session.get(Tenant, user.tenant_id)
        if tenant is None or tenant.status != TenantStatus.ACTIVE:
            status = tenant.status if tenant else "deleted"
            raise Forbidden(f"this organisation is {status}; ask your Loraplex operator")
    viewer = _viewer(user)
    request.state.viewer = viewer  # the page header shows who is signed in
    return viewer


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


@functools.cache
def _dummy_hash() -> str:
    return hash_password(secrets.token_hex(16))


def _viewer(user: User) -> Viewer:
    return Viewer(user.id, user.email, user.name, UserRole(user.role), user.tenant_id)


class SignInThrottle:
    """At most `per_minute` sign-in attempts per email, and ten times that per client address
    (one address may be a whole office behind NAT; one email is one account under attack)."""

    def __init__(self, per_minute: int, redis: Redis | None = None):
        storage: Storage = MemoryStorage()
        if redis is not None:  # counts shared by every replica, on the process's own pool
            storage = RedisStorage(
                "async+redis://",
                implementation="redispy",
                key_prefix="loraplex:login",
                connection_pool=redis.connection_pool,
            )
        self._limiter = MovingWindowRateLimiter(storage)
        self._per_email = RateLimitItemPerMinute(per_minute)
        self._per_address = RateLimitItemPerMinute(10 * per_minute)

    async def allow_request(self, request: Request[Any, Any, Any], email: str) -> bool:
        """Count one password attempt for `email` from the request's client address."""
        return await self.allow(email, request.client.host if request.client else "unknown")

    async def allow(self, email: str, address: str) -> bool:
        """Count one attempt; False when either the email or the address is over the limit."""
        by_email = await self._limiter.hit(self._per_email, "email", email.strip().lower())
        by_address = await self._limiter.hit(self._per_address, "address", address)
        return by_email and by_address
