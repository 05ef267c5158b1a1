"""People who sign in to the console or the admin UI."""

from __future__ import annotations

import enum
from uuid import UUID

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class UserRole(enum.StrEnum):
    """What a user may do: operators run the platform, tenant roles act within one tenant."""

    OPERATOR = "operator"
    TENANT_ADMIN = "tenant_admin"
    TENANT_MEMBER = "tenant_member"


class User(Base):
    """A person; operators have no tenant, everyone else belongs to exactly one."""

    __tablename__ = "users"

    email: Mapped[str] = mapped_column(String(320), unique=True, index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    password_hash: Mapped[str | None] = mapped_column(String(200), default=None)  # argon2
    role: Mapped[UserRole] = mapped_column(String(16))
    tenant_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True, default=None
    )
    is_active: Mapped[bool] = mapped_column(default=True)
    # Raised to end every console session of the user (see loraplex.web.session).
    session_epoch: Mapped[int] = mapped_column(default=0, server_default="0")
