"""A tenant's adapters, their immutable versions and the aliases that point at them."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any
from uuid import UUID

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import JSON, BigInteger, ForeignKey, String, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column, relationship

from loraplex.db.models.base_models import BaseModel
from loraplex.db.orm import Base


class VersionStatus(enum.StrEnum):
    """uploading -> validating -> ready | failed; ready -> archived."""

    UPLOADING = "uploading"
    VALIDATING = "validating"
    READY = "ready"
    FAILED = "failed"
    ARCHIVED = "archived"


class VersionSource(enum.StrEnum):
    """Where a version came from."""

    UPLOAD = "upload"
    FINE_TUNE = "fine_tune"
    IMPORT = "import"  # fetched from S3, HTTPS or a hub by an import job


class Adapter(Base):
    """A named LoRA adapter of one tenant on one base model."""

    __tablename__ = "adapters"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(64))
    base_model_id: Mapped[UUID] = mapped_column(ForeignKey("base_models.id", ondelete="RESTRICT"))
    description: Mapped[str] = mapped_column(String(1000), default="")
    base_model: Mapped[BaseModel] = relationship(lazy="joined", innerjoin=True)


class AdapterVersion(Base):
    """One immutable upload or fine-tune output of an adapter."""

    __tablename__ = "adapter_versions"
    __table_args__ = (UniqueConstraint("adapter_id", "number"),)

    adapter_id: Mapped[UUID] = mapped_column(
        ForeignKey("adapters.id", ondelete="CASCADE"), index=True
    )
    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    number: Mapped[int]
    status: Mapped[VersionStatus] = mapped_column(String(16), default=VersionStatus.UPLOADING)
    source: Mapped[VersionSource] = mapped_column(String(16), default=VersionSource.UPLOAD)
    rank: Mapped[int | None] = mapped_column(default=None)
    alpha: Mapped[float | None] = mapped_column(default=None)
    target_modules: Mapped[list[str]] = mapped_column(JSON, default=list)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    sha256: Mapped[str] = mapped_column(String(64), default="")
    storage_key: Mapped[str] = mapped_column(String(500), default="")
    job_id: Mapped[UUID | None] = mapped_column(default=None)
    error: Mapped[str] = mapped_column(String(2000), default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class AdapterAlias(Base):
    """A movable name (`prod`, `staging`, ...) for a version, with an optional canary.

    A pinned alias keeps its version (and its canary's) resident on the engines that load
    it; the pin follows the alias when it moves (serving/live/placement.py).
    """

    __tablename__ = "adapter_aliases"
    __table_args__ = (UniqueConstraint("adapter_id", "name"),)

    adapter_id: Mapped[UUID] = mapped_column(
        ForeignKey("adapters.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[UUID] = mapped_column(ForeignKey("adapter_versions.id", ondelete="RESTRICT"))
    previous_version_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("adapter_versions.id", ondelete="SET NULL"), default=None
    )
    canary_version_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("adapter_versions.id", ondelete="SET NULL"), default=None
    )
    canary_weight: Mapped[int] = mapped_column(default=0)  # percent of traffic, 0-100
    pinned: Mapped[bool] = mapped_column(default=False, server_default=false())
    # Canary analysis (control/canary): the policy (None: no analysis), when the current
    # canary started, and the latest analysis (kept after the canary ends, for the page).
    # none_as_null: no policy is SQL NULL, not JSON null (which `IS NOT NULL` would match)
    canary_policy: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True), default=None
    )
    canary_started_at: Mapped[datetime | None] = mapped_column(
        DateTimeUTC(timezone=True), default=None
    )
    canary_decision: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
