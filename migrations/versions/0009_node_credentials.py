"""node credentials: one secret per agent, bound to one engine name, revocable

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "node_credentials",
        sa.Column("id", advanced_alchemy.types.guid.GUID(length=16), nullable=False),
        sa.Column("engine_name", sa.String(length=100), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("last_used_at", advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=True),
        sa.Column("revoked_at", advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=True),
        sa.Column("sa_orm_sentinel", sa.Integer(), nullable=True),
        sa.Column("created_at", advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
        sa.Column("updated_at", advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_credentials")),
    )  # fmt: skip
    with op.batch_alter_table("node_credentials", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_node_credentials_engine_name"), ["engine_name"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_node_credentials_prefix"), ["prefix"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("node_credentials", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_credentials_prefix"))
        batch_op.drop_index(batch_op.f("ix_node_credentials_engine_name"))
    op.drop_table("node_credentials")
