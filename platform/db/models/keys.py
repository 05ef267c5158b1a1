"""API keys: only a hash of the secret is stored; the prefix finds the row."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base

# What a key's tokens are in the tenant's spend (its `kind`): its own inference, or an eval
# run's requests (the worker's key for that run). Not settable through the API: `KeyCreate`
# has no such field, only `ApiKeyService.create_tenant_key(usage_kind=...)` sets it.
INFERENCE_USAGE = "inference"
EVAL_USAGE = "eval"


class ApiKey(Base):
    """A bearer credential; `tenant_id` None means an operator key."""

    __tablename__ = "api_keys"

    tenant_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True, default=None
    )
    user_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(32), unique=True, index=True)
    secret_hash: Mapped[str] = mapped_column(String(64))  # sha256 hex of the full key
    scopes: Mapped[list[str]] = mapped_column(JSON, default=list)
    expires_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
    usage_kind: Mapped[str] = mapped_column(
        String(16), default=INFERENCE_USAGE, server_default=INFERENCE_USAGE
    )
