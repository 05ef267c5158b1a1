"""usage: per tenant, adapter version, model and minute

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # adapter_version_id is NOT NULL: base-model rows hold a nil-UUID sentinel so the unique
    # constraint aggregates them too (see loraplex.db.models.usage).
    op.create_table('usage',
    sa.Column('id', advanced_alchemy.types.guid.GUID(length=16), nullable=False),
    sa.Column('tenant_id', advanced_alchemy.types.guid.GUID(length=16), nullable=False),
    sa.Column('adapter_version_id', advanced_alchemy.types.guid.GUID(length=16), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('minute', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
    sa.Column('requests', sa.BigInteger(), nullable=False),
    sa.Column('prompt_tokens', sa.BigInteger(), nullable=False),
    sa.Column('completion_tokens', sa.BigInteger(), nullable=False),
    sa.Column('errors', sa.BigInteger(), nullable=False),
    sa.Column('cut_streams', sa.BigInteger(), nullable=False),
    sa.Column('sa_orm_sentinel', sa.Integer(), nullable=True),
    sa.Column('created_at', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
    sa.Column('updated_at', advanced_alchemy.types.datetime.DateTimeUTC(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_usage')),
    sa.UniqueConstraint('tenant_id', 'minute', 'model', 'adapter_version_id', name=op.f('uq_usage_tenant_id'))
    )
    with op.batch_alter_table('usage', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_usage_minute'), ['minute'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('usage', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_usage_minute'))
    op.drop_table('usage')
