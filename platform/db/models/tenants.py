"""Tenants, the plans they are on, and per-tenant quota overrides."""

from __future__ import annotations

import enum
from typing import Any
from uuid import UUID

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from loraplex.db.orm import Base


class TenantStatus(enum.StrEnum):
    """Lifecycle of a tenant; only `active` tenants' keys authenticate."""

    ACTIVE = "active"
    SUSPENDED = "suspended"
    DELETED = "deleted"


class Plan(Base):
    """A named bundle of quotas; tenants reference one, overrides adjust single limits."""

    __tablename__ = "plans"

    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(String(500), default="")
    # Quota values by name (see loraplex.control.quotas.QUOTA_FIELDS); JSON so a new
    # quota is a code change, not a migration of every plan row.
    limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class Tenant(Base):
    """A customer organisation; owns users, keys, adapters and usage."""

    __tablename__ = "tenants"

    slug: Mapped[str] = mapped_column(String(63), unique=True, index=True)
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[TenantStatus] = mapped_column(String(16), default=TenantStatus.ACTIVE)
    plan_id: Mapped[UUID] = mapped_column(ForeignKey("plans.id", ondelete="RESTRICT"))
    plan: Mapped[Plan] = relationship(lazy="joined", innerjoin=True)
    override: Mapped[QuotaOverride | None] = relationship(
        lazy="joined", uselist=False, cascade="all, delete-orphan"
    )


class QuotaOverride(Base):
    """Limits that replace the plan's values for one tenant."""

    __tablename__ = "quota_overrides"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), unique=True
    )
    limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
