"""engine drain: the agent's report of its engine's health, and whether it drains

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Null engine_healthy: the API probes the engine's health itself (an operator's engine,
    # or an agent that reports none).
    with op.batch_alter_table('engines', schema=None) as batch_op:
        batch_op.add_column(sa.Column('engine_healthy', sa.Boolean(), nullable=True))
        batch_op.add_column(
            sa.Column('draining', sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table('engines', schema=None) as batch_op:
        batch_op.drop_column('draining')
        batch_op.drop_column('engine_healthy')
