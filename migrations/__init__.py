"""Alembic environment and revisions."""
