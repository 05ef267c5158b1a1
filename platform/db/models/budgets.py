"""Prices per base model, tenants' money budgets, and spend per day (the billing record)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import BigInteger, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base

# As in `usage`: a spend row with no key (a fine-tune's training) or no adapter (a base
# model) stores this named sentinel, since NULLs never collide in a unique constraint.
NOBODY = UUID(int=0)
NAME_MAX = 200


class ModelPrice(Base):
    """What one base model's tokens cost, in micro-units per million tokens."""

    __tablename__ = "model_prices"

    base_model: Mapped[str] = mapped_column(String(NAME_MAX), unique=True)
    prompt_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    training_micros: Mapped[int] = mapped_column(BigInteger, default=0)


class Budget(Base):
    """A tenant's allowance of money per UTC day or month, for itself, a key or an adapter."""

    __tablename__ = "budgets"
    __table_args__ = (UniqueConstraint("tenant_id", "scope", "subject_id", "period"),)

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    scope: Mapped[str] = mapped_column(String(16))  # tenant | key | adapter
    subject_id: Mapped[UUID] = mapped_column(default=NOBODY)  # the key or adapter
    period: Mapped[str] = mapped_column(String(8))  # day | month
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    alert_bp: Mapped[int] = mapped_column(Integer, default=8000)  # soft alert at 80 %


class Spend(Base):
    """Money spent per (tenant, UTC day, model, key, adapter, kind), with its tokens.

    No foreign keys, like `usage`: a billing record outlives keys and adapters, and a row
    the gateway flushes must never be refused.
    """

    __tablename__ = "spend"
    __table_args__ = (
        UniqueConstraint("tenant_id", "day", "model", "api_key_id", "adapter_id", "kind"),
    )

    tenant_id: Mapped[UUID]
    day: Mapped[datetime] = mapped_column(DateTimeUTC(timezone=True), index=True)
    model: Mapped[str] = mapped_column(String(NAME_MAX))  # as the client named it
    base_model: Mapped[str] = mapped_column(String(NAME_MAX))
    api_key_id: Mapped[UUID] = mapped_column(default=NOBODY)
    adapter_id: Mapped[UUID] = mapped_column(default=NOBODY)
    kind: Mapped[str] = mapped_column(String(16))  # inference | eval | training
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    training_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    amount_micros: Mapped[int] = mapped_column(BigInteger, default=0)
