"""budgets: prices, spend and money budgets (filled in by the budgets work)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GUID = advanced_alchemy.types.guid.GUID(length=16)
UTC = advanced_alchemy.types.datetime.DateTimeUTC(timezone=True)


def _audit_columns() -> list[sa.Column]:
    return [
        sa.Column("sa_orm_sentinel", sa.Integer(), nullable=True),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("updated_at", UTC, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "model_prices",
        sa.Column("id", GUID, nullable=False),
        sa.Column("base_model", sa.String(length=200), nullable=False),
        sa.Column("prompt_micros", sa.BigInteger(), nullable=False),
        sa.Column("completion_micros", sa.BigInteger(), nullable=False),
        sa.Column("training_micros", sa.BigInteger(), nullable=False),
        *_audit_columns(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_prices")),
        sa.UniqueConstraint("base_model", name=op.f("uq_model_prices_base_model")),
    )
    op.create_table(
        "spend",
        sa.Column("id", GUID, nullable=False),
        sa.Column("tenant_id", GUID, nullable=False),
        sa.Column("day", UTC, nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("base_model", sa.String(length=200), nullable=False),
        sa.Column("api_key_id", GUID, nullable=False),
        sa.Column("adapter_id", GUID, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("training_tokens", sa.BigInteger(), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        *_audit_columns(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_spend")),
        sa.UniqueConstraint(
            "tenant_id", "day", "model", "api_key_id", "adapter_id", "kind",
            name=op.f("uq_spend_tenant_id"),
        ),
    )  # fmt: skip
    op.create_index(op.f("ix_spend_day"), "spend", ["day"], unique=False)
    op.create_table(
        "budgets",
        sa.Column("id", GUID, nullable=False),
        sa.Column("tenant_id", GUID, nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("subject_id", GUID, nullable=False),
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("alert_bp", sa.Integer(), nullable=False),
        *_audit_columns(),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"],
            name=op.f("fk_budgets_tenant_id_tenants"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budgets")),
        sa.UniqueConstraint(
            "tenant_id", "scope", "subject_id", "period", name=op.f("uq_budgets_tenant_id")
        ),
    )  # fmt: skip
    op.create_index(op.f("ix_budgets_tenant_id"), "budgets", ["tenant_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_budgets_tenant_id"), table_name="budgets")
    op.drop_table("budgets")
    op.drop_index(op.f("ix_spend_day"), table_name="spend")
    op.drop_table("spend")
    op.drop_table("model_prices")
