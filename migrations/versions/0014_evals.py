"""evals: evals, runs and their output items; a fine-tune's eval gate

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = '0014'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GUID = advanced_alchemy.types.guid.GUID(length=16)
WHEN = advanced_alchemy.types.datetime.DateTimeUTC(timezone=True)


def _audit() -> list[sa.Column]:
    return [
        sa.Column("sa_orm_sentinel", sa.Integer(), nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
    ]


def upgrade() -> None:
    # New tables and one nullable column: the old release neither reads nor writes them.
    op.create_table(
        "evals",
        sa.Column("id", GUID, nullable=False),
        sa.Column("tenant_id", GUID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("data_source_config", sa.JSON(), nullable=False),
        sa.Column("testing_criteria", sa.JSON(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        *_audit(),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_evals_tenant_id_tenants"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evals")),
    )  # fmt: skip
    op.create_table(
        "eval_runs",
        sa.Column("id", GUID, nullable=False),
        sa.Column("eval_id", GUID, nullable=False),
        sa.Column("tenant_id", GUID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("data_source", sa.JSON(), nullable=False),
        sa.Column("result_counts", sa.JSON(), nullable=False),
        sa.Column("per_testing_criteria_results", sa.JSON(), nullable=False),
        sa.Column("per_model_usage", sa.JSON(), nullable=False),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("adapter_version_id", GUID, nullable=True),
        sa.Column("fine_tune_job_id", GUID, nullable=True),
        *_audit(),
        sa.ForeignKeyConstraint(["eval_id"], ["evals.id"], name=op.f("fk_eval_runs_eval_id_evals"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_eval_runs_tenant_id_tenants"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_runs")),
    )  # fmt: skip
    op.create_table(
        "eval_run_items",
        sa.Column("id", GUID, nullable=False),
        sa.Column("run_id", GUID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("item", sa.JSON(), nullable=False),
        sa.Column("sample", sa.JSON(), nullable=False),
        sa.Column("results", sa.JSON(), nullable=False),
        *_audit(),
        sa.ForeignKeyConstraint(["run_id"], ["eval_runs.id"], name=op.f("fk_eval_run_items_run_id_eval_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_run_items")),
    )  # fmt: skip
    with op.batch_alter_table("evals", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evals_tenant_id"), ["tenant_id"], unique=False)
    with op.batch_alter_table("eval_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_eval_runs_eval_id"), ["eval_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_eval_runs_tenant_id"), ["tenant_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_eval_runs_status"), ["status"], unique=False)
    with op.batch_alter_table("eval_run_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_eval_run_items_run_id"), ["run_id"], unique=False)
    with op.batch_alter_table("fine_tune_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("eval_gate", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fine_tune_jobs", schema=None) as batch_op:
        batch_op.drop_column("eval_gate")
    with op.batch_alter_table("eval_run_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_eval_run_items_run_id"))
    with op.batch_alter_table("eval_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_eval_runs_status"))
        batch_op.drop_index(batch_op.f("ix_eval_runs_tenant_id"))
        batch_op.drop_index(batch_op.f("ix_eval_runs_eval_id"))
    with op.batch_alter_table("evals", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evals_tenant_id"))
    op.drop_table("eval_run_items")
    op.drop_table("eval_runs")
    op.drop_table("evals")
