"""alias pins: a tenant keeps an alias's versions resident on engines

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # server_default fills the existing rows: nothing was pinned through an alias before.
    with op.batch_alter_table('adapter_aliases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pinned', sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('adapter_aliases', schema=None) as batch_op:
        batch_op.drop_column('pinned')
