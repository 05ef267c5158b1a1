"""Inference usage, aggregated per tenant, adapter version, requested model and minute."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import BigInteger, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base

# Requests that ran on a base model have no adapter version. The column stores this named
# sentinel instead of NULL because SQL treats NULLs as distinct in a unique constraint, so
# base-model rows would never collide and `ON CONFLICT` could not aggregate them. The
# alternatives do not fit both dialects: `NULLS NOT DISTINCT` is PostgreSQL 15+ only, and a
# COALESCE expression index is not reflected by SQLite, which breaks the models == migrations
# check. The service maps the sentinel back to None, so the API shows `null`.
BASE_MODEL_VERSION = UUID(int=0)

MODEL_NAME_MAX = 200
COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "errors", "cut_streams")


class Usage(Base):
    """Counters for one (tenant, adapter version, model, UTC minute).

    No foreign keys: usage is a billing record that outlives adapter versions (like the audit
    log), and a row the gateway flushes must never be refused, or the batch would retry forever.
    """

    __tablename__ = "usage"
    # Column order makes the unique index serve "one tenant over a time range" reads too.
    __table_args__ = (UniqueConstraint("tenant_id", "minute", "model", "adapter_version_id"),)

    tenant_id: Mapped[UUID]
    adapter_version_id: Mapped[UUID] = mapped_column(default=BASE_MODEL_VERSION)
    model: Mapped[str] = mapped_column(String(MODEL_NAME_MAX))  # as the client asked for it
    minute: Mapped[datetime] = mapped_column(DateTimeUTC(timezone=True), index=True)
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(BigInteger, default=0)
    cut_streams: Mapped[int] = mapped_column(BigInteger, default=0)
