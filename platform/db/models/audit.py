"""The append-only record of every change."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class AuditEntry(Base):
    """Who did what to which object. `tenant_id` has no foreign key: it outlives tenants."""

    __tablename__ = "audit_log"

    actor: Mapped[str] = mapped_column(String(200))  # "key:<prefix>" | "user:<email>" | "cli"
    tenant_id: Mapped[UUID | None] = mapped_column(index=True, default=None)
    action: Mapped[str] = mapped_column(String(100), index=True)  # e.g. "tenant.create"
    target_type: Mapped[str] = mapped_column(String(50))
    target_id: Mapped[str] = mapped_column(String(100))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
