"""correctness probes: a version's recorded greedy answers and their replays

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GUID = advanced_alchemy.types.guid.GUID
UTC_TIME = advanced_alchemy.types.datetime.DateTimeUTC


def upgrade() -> None:
    # New tables only: the old release never reads them.
    op.create_table(
        "probe_answers",
        sa.Column("id", GUID(length=16), nullable=False),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("base_model", sa.String(length=200), nullable=False),
        sa.Column("version_id", GUID(length=16), nullable=True),
        sa.Column("engine_kind", sa.String(length=16), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("prompt", sa.String(length=2000), nullable=False),
        sa.Column("answer", sa.String(length=4000), nullable=False),
        sa.Column("engine_config", sa.JSON(), nullable=False),
        sa.Column("sa_orm_sentinel", sa.Integer(), nullable=True),
        sa.Column("created_at", UTC_TIME(timezone=True), nullable=False),
        sa.Column("updated_at", UTC_TIME(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_answers")),
        sa.UniqueConstraint("key", name=op.f("uq_probe_answers_key")),
    )
    with op.batch_alter_table("probe_answers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_probe_answers_version_id"), ["version_id"], unique=False)
    op.create_table(
        "probe_replays",
        sa.Column("id", GUID(length=16), nullable=False),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("engine_id", sa.String(length=64), nullable=False),
        sa.Column("engine_name", sa.String(length=200), nullable=False),
        sa.Column("version_id", GUID(length=16), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("matched", sa.Integer(), nullable=False),
        sa.Column("differed", sa.Integer(), nullable=False),
        sa.Column("unanswered", sa.Integer(), nullable=False),
        sa.Column("sa_orm_sentinel", sa.Integer(), nullable=True),
        sa.Column("created_at", UTC_TIME(timezone=True), nullable=False),
        sa.Column("updated_at", UTC_TIME(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_replays")),
        sa.UniqueConstraint("key", name=op.f("uq_probe_replays_key")),
    )
    with op.batch_alter_table("probe_replays", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_probe_replays_engine_id"), ["engine_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("probe_replays", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_probe_replays_engine_id"))
    op.drop_table("probe_replays")
    with op.batch_alter_table("probe_answers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_probe_answers_version_id"))
    op.drop_table("probe_answers")
