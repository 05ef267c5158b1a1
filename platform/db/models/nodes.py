"""Node credentials: what a `loraplex agent` proves itself with, one engine name each."""

from __future__ import annotations

from datetime import datetime

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class NodeCredential(Base):
    """A bearer secret that may register, heartbeat and deregister one engine name only.

    Like API keys, only the SHA-256 of the secret is stored and the prefix finds the row.
    Several live credentials may name the same engine: that is how one is rotated (mint the
    new one, deploy it, revoke the old one).
    """

    __tablename__ = "node_credentials"

    engine_name: Mapped[str] = mapped_column(String(100), index=True)
    prefix: Mapped[str] = mapped_column(String(32), unique=True, index=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str] = mapped_column(String(200), default="")
    last_used_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
