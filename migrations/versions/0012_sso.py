"""single sign-on: users' identities at OpenID Connect providers

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import advanced_alchemy
import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A new table only: the previous release never reads it (additive).
    op.create_table(
        'external_identities',
        sa.Column('id', advanced_alchemy.types.guid.GUID(length=16), nullable=False),
        sa.Column('provider', sa.String(length=64), nullable=False),
        sa.Column('subject', sa.String(length=255), nullable=False),
        sa.Column('user_id', advanced_alchemy.types.guid.GUID(length=16), nullable=False),
        sa.Column('disabled_by_provider', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column('last_sign_in_at', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=True),
        sa.Column('refresh_token_sealed', sa.Text(), nullable=True),
        sa.Column('checked_at', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=True),
        sa.Column('sa_orm_sentinel', sa.Integer(), nullable=True),
        sa.Column('created_at', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
        sa.Column('updated_at', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_external_identities_user_id_users'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_external_identities')),
        sa.UniqueConstraint('provider', 'subject', name=op.f('uq_external_identities_provider')),
    )  # fmt: skip
    with op.batch_alter_table('external_identities', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_external_identities_user_id'), ['user_id'], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table('external_identities', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_external_identities_user_id'))
    op.drop_table('external_identities')
