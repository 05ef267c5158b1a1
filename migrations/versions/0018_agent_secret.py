"""agent secret: each self-registered agent's own secret, sealed, for the API to call it with

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0018'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Additive: the old release neither reads nor writes it, and sends its agents the shared
    # token as before.
    with op.batch_alter_table('engines', schema=None) as batch_op:
        batch_op.add_column(sa.Column('agent_secret_sealed', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('engines', schema=None) as batch_op:
        batch_op.drop_column('agent_secret_sealed')
