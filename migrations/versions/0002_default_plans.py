"""default plans: free, pro, enterprise

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import advanced_alchemy.types
import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A frozen copy: a migration must not change when loraplex.control.quotas later does.
PLANS = {
    "free": {
        "requests_per_minute": 60, "tokens_per_minute": 20000, "concurrent_requests": 4,
        "concurrent_streams": 2, "max_tokens_per_request": 512, "daily_tokens": 200000,
        "max_adapters": 5, "max_storage_bytes": 524288000, "max_rank": 16,
        "concurrent_fine_tunes": 1, "cold_loads_per_minute": 10, "pinned_adapters": 0, "priority": 0,
    },
    "pro": {
        "requests_per_minute": 600, "tokens_per_minute": 200000, "concurrent_requests": 32,
        "concurrent_streams": 32, "max_tokens_per_request": 4096, "daily_tokens": 5000000,
        "max_adapters": 100, "max_storage_bytes": 21474836480, "max_rank": 64,
        "concurrent_fine_tunes": 4, "cold_loads_per_minute": 60, "pinned_adapters": 2, "priority": 1,
    },
    "enterprise": {
        "requests_per_minute": 6000, "tokens_per_minute": 2000000, "concurrent_requests": 256,
        "concurrent_streams": 256, "max_tokens_per_request": 8192, "daily_tokens": 100000000,
        "max_adapters": 1000, "max_storage_bytes": 214748364800, "max_rank": 128,
        "concurrent_fine_tunes": 16, "cold_loads_per_minute": 600, "pinned_adapters": 16, "priority": 2,
    },
}

plans = sa.table(
    "plans",
    sa.column("id", advanced_alchemy.types.GUID(length=16)),
    sa.column("name", sa.String),
    sa.column("description", sa.String),
    sa.column("limits", sa.JSON),
    sa.column("created_at", advanced_alchemy.types.DateTimeUTC(timezone=True)),
    sa.column("updated_at", advanced_alchemy.types.DateTimeUTC(timezone=True)),
)


def upgrade() -> None:
    now = datetime.now(UTC)
    op.bulk_insert(plans, [
        {"id": uuid.uuid4(), "name": name, "description": f"the {name} plan", "limits": limits,
         "created_at": now, "updated_at": now}
        for name, limits in PLANS.items()
    ])


def downgrade() -> None:
    op.execute(plans.delete().where(plans.c.name.in_(list(PLANS))))
