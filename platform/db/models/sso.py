"""Who a console user is at an identity provider (single sign-on)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import ForeignKey, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class ExternalIdentity(Base):
    """A user's subject at one provider (the provider's name in the settings)."""

    __tablename__ = "external_identities"
    __table_args__ = (UniqueConstraint("provider", "subject"),)

    provider: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # Set when the provider ended the user's access at a renewal (the user was deactivated
    # for it); a later sign-in the provider vouches for makes them active again. A user an
    # operator deactivated stays deactivated.
    disabled_by_provider: Mapped[bool] = mapped_column(default=False, server_default=false())
    last_sign_in_at: Mapped[datetime | None] = mapped_column(
        DateTimeUTC(timezone=True), default=None
    )
    # The provider's refresh token, sealed (auth/sso/sealing.py), and when the provider last
    # vouched for the user: every session of the user renews through this one row, under a
    # row lock, so two requests never spend one (rotating) refresh token twice.
    refresh_token_sealed: Mapped[str | None] = mapped_column(Text, default=None)
    checked_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
