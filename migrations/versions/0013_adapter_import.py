"""adapter import: import jobs from s3://, https:// and the hub

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A new table only: the old release never reads it.
    op.create_table(
        "adapter_imports",
        sa.Column("id", advanced_alchemy.types.guid.GUID(length=16), nullable=False),
        sa.Column("tenant_id", advanced_alchemy.types.guid.GUID(length=16), nullable=False),
        sa.Column("adapter_id", advanced_alchemy.types.guid.GUID(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.JSON(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("bytes_fetched", sa.BigInteger(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("version_id", advanced_alchemy.types.guid.GUID(length=16), nullable=True),
        sa.Column("sa_orm_sentinel", sa.Integer(), nullable=True),
        sa.Column("created_at", advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
        sa.Column("updated_at", advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_adapter_imports_tenant_id_tenants"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["adapter_id"], ["adapters.id"], name=op.f("fk_adapter_imports_adapter_id_adapters"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["version_id"], ["adapter_versions.id"], name=op.f("fk_adapter_imports_version_id_adapter_versions"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adapter_imports")),
    )  # fmt: skip
    with op.batch_alter_table("adapter_imports", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_adapter_imports_tenant_id"), ["tenant_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_adapter_imports_adapter_id"), ["adapter_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("adapter_imports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_adapter_imports_adapter_id"))
        batch_op.drop_index(batch_op.f("ix_adapter_imports_tenant_id"))
    op.drop_table("adapter_imports")
