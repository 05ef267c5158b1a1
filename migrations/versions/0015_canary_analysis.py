"""canary analysis: an alias canary's policy and its decisions

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = '0015'
down_revision: str | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns only: the old release neither reads nor writes them.
    with op.batch_alter_table("adapter_aliases", schema=None) as batch_op:
        batch_op.add_column(sa.Column("canary_policy", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column(
                "canary_started_at",
                advanced_alchemy.types.datetime.DateTimeUTC(timezone=True),
                nullable=True,
            )
        )
        batch_op.add_column(sa.Column("canary_decision", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("adapter_aliases", schema=None) as batch_op:
        batch_op.drop_column("canary_decision")
        batch_op.drop_column("canary_started_at")
        batch_op.drop_column("canary_policy")
