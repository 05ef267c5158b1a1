"""agent registration: engines an agent registered, its last heartbeat, the engine's restarts

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Null agent_seen_at: registered by an operator (or before agents registered themselves).
    with op.batch_alter_table('engines', schema=None) as batch_op:
        batch_op.add_column(sa.Column('agent_seen_at', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column('engine_generation', sa.Integer(), server_default='0', nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table('engines', schema=None) as batch_op:
        batch_op.drop_column('engine_generation')
        batch_op.drop_column('agent_seen_at')
