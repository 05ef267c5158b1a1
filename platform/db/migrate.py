"""`loraplex db upgrade|downgrade`: Alembic driven from code, without an alembic.ini."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import loraplex.migrations


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the packaged migrations and `database_url`."""
    config = Config()
    config.set_main_option("script_location", str(Path(loraplex.migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database up to `revision`."""
    _ensure_sqlite_dir(database_url)
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """Migrate the database down to `revision`."""
    command.downgrade(alembic_config(database_url), revision)


def _ensure_sqlite_dir(database_url: str) -> None:
    if database_url.startswith("sqlite") and ":///" in database_url:
        path = database_url.split(":///", 1)[1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
