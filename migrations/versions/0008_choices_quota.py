"""choices quota: the default plans get max_choices_per_request (OpenAI's n)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A frozen copy, like 0002's: plans an operator already set it on are left alone.
CHOICES = {"free": 4, "pro": 16, "enterprise": 128}
KEY = "max_choices_per_request"

plans = sa.table("plans", sa.column("name", sa.String), sa.column("limits", sa.JSON))


def upgrade() -> None:
    connection = op.get_bind()
    for name, limits in connection.execute(sa.select(plans.c.name, plans.c.limits)).all():
        if name in CHOICES and KEY not in (limits or {}):
            connection.execute(
                plans.update()
                .where(plans.c.name == name)
                .values(limits={**(limits or {}), KEY: CHOICES[name]})
            )


def downgrade() -> None:
    connection = op.get_bind()
    for name, limits in connection.execute(sa.select(plans.c.name, plans.c.limits)).all():
        if limits and KEY in limits:
            rest = {k: v for k, v in limits.items() if k != KEY}
            connection.execute(plans.update().where(plans.c.name == name).values(limits=rest))
