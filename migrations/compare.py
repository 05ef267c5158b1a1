"""Type comparison for autogenerate, shared by env.py and the schema-drift test."""

from __future__ import annotations

from advanced_alchemy.types import GUID


def compare_type(
    context: object,
    inspected: object,
    metadata: object,
    inspected_type: object,
    metadata_type: object,
) -> bool | None:
    """GUID reflects as NUMERIC on SQLite and as UUID on PostgreSQL: same column, no change."""
    if isinstance(metadata_type, GUID):
        return False
    return None  # Alembic's default comparison
