"""Users of a tenant (console logins) and operators."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

import anyio
import msgspec
from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService

from loraplex.api.schemas import Input, Output
from loraplex.auth.passwords import hash_password
from loraplex.control.audit.service import record
from loraplex.control.keys.service import ApiKeyService
from loraplex.db.models import User, UserRole
from loraplex.errors import Conflict, InvalidInput, NotFound

# No whitespace, and no control or invisible formatting characters (bidi overrides, zero-width
# ones): an address shown in the console and the audit log must read as what it is.
_EMAIL_CHAR = (
    r"[^@\s\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]"
)
Email = Annotated[
    str,
    msgspec.Meta(pattern=rf"^{_EMAIL_CHAR}+@{_EMAIL_CHAR}+\.{_EMAIL_CHAR}+$(?!\n)", max_length=320),
]
MIN_PASSWORD, MAX_PASSWORD = 8, 200
Password = Annotated[str, msgspec.Meta(min_length=MIN_PASSWORD, max_length=MAX_PASSWORD)]


class UserCreate(Input):
    """A new user of a tenant."""

    email: Email
    name: str = ""
    role: UserRole = UserRole.TENANT_MEMBER
    password: Password | None = None


class UserOut(Output):
    """A user; never the password hash."""

    id: UUID
    email: str
    name: str
    role: str
    tenant_id: UUID | None
    is_active: bool
    created_at: datetime


class UserService(SQLAlchemyAsyncRepositoryService[User]):
    """Users."""

    class Repo(SQLAlchemyAsyncRepository[User]):
        """Users."""

        model_type = User

    repository_type = Repo

    async def create_user(self, tenant_id: UUID | None, data: UserCreate, actor: str) -> User:
        """Create a user; tenants cannot create operators, emails are unique."""
        if tenant_id is not None and data.role == UserRole.OPERATOR:
            raise InvalidInput("a tenant user cannot have the operator role", param="role")
        email = data.email.lower()
        if await self.exists(email=email):
            raise Conflict(f"a user with email '{email}' already exists", param="email")
        user = await self.create(
            User(
                email=email,
                name=data.name,
                role=data.role,
                tenant_id=tenant_id,
                password_hash=await _hashed(data.password) if data.password else None,
            )
        )
        record(
            self.repository.session,
            actor,
            "user.create",
            user,
            tenant_id=tenant_id,
            email=email,
            role=data.role,
        )
        return user

    async def set_password(self, user: User, password: str, actor: str) -> None:
        """Give `user` a new password (argon2id); their console sessions end with the old one."""
        if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
            raise InvalidInput(
                f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters", param="password"
            )
        user.password_hash = await _hashed(password)
        await self._save(user, actor, "user.set_password")

    async def end_sessions(self, user: User, actor: str) -> None:
        """End every console session of `user` (their password stays)."""
        user.session_epoch = (user.session_epoch or 0) + 1
        await self._save(user, actor, "user.end_sessions")

    async def _save(self, user: User, actor: str, action: str) -> None:
        await self.update(user)
        session = self.repository.session
        record(session, actor, action, user, tenant_id=user.tenant_id, email=user.email)

    async def of_tenant(self, tenant_id: UUID, user_id: UUID) -> User:
        """The tenant's user `user_id`; 404 for anyone else's."""
        user = await self.get_one_or_none(id=user_id, tenant_id=tenant_id)
        if user is None:
            raise NotFound("user not found")
        return user

    async def remove(self, tenant_id: UUID, user_id: UUID, actor: str) -> None:
        """Delete a tenant's user and revoke their API keys, in one transaction: a key must
        not outlive the person it was made for."""
        user = await self.of_tenant(tenant_id, user_id)
        await ApiKeyService(session=self.repository.session).revoke_all_of_user(user.id, actor)
        await self.delete(user.id)
        record(
            self.repository.session,
            actor,
            "user.delete",
            user,
            tenant_id=tenant_id,
            email=user.email,
        )


async def _hashed(password: str) -> str:
    """argon2id off the event loop (CFFI releases the GIL for the hash)."""
    return await anyio.to_thread.run_sync(hash_password, password)
