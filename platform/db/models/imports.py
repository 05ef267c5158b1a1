"""Adapter imports: a version fetched from where a tenant keeps it (S3, HTTPS, a hub)."""

from __future__ import annotations

import enum
from typing import Any
from uuid import UUID

from sqlalchemy import JSON, BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class ImportStatus(enum.StrEnum):
    """queued -> fetching -> validating -> succeeded | failed (each step a compare-and-set)."""

    QUEUED = "queued"
    FETCHING = "fetching"
    VALIDATING = "validating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class AdapterImport(Base):
    """One import job. `source` is what may be shown: never a credential or a URL's query
    (those travel only in the task message, sealed with the platform's secret)."""

    __tablename__ = "adapter_imports"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    adapter_id: Mapped[UUID] = mapped_column(
        ForeignKey("adapters.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[ImportStatus] = mapped_column(String(16), default=ImportStatus.QUEUED)
    source: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    actor: Mapped[str] = mapped_column(String(200), default="")
    bytes_fetched: Mapped[int] = mapped_column(BigInteger, default=0)
    events: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    version_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("adapter_versions.id", ondelete="SET NULL"), default=None
    )
