"""`loraplex up`: the embedded all-in-one for a first run on one machine.

Migrates the database (SQLite by default), makes sure an operator key exists (written once
to `<data_dir>/operator.key`, readable only by its owner), then serves the API.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import click

from loraplex.settings import Settings


def ensure_operator_key(settings: Settings) -> Path:
    """Create an operator key on first run and keep it in the data dir; return its path."""
    from loraplex.control.bootstrap import create_operator
    from loraplex.db.config import sqlalchemy_config

    path = settings.data_dir / "operator.key"
    if path.exists():
        return path

    async def mint() -> str:
        config = sqlalchemy_config(settings)
        try:
            async with config.get_session() as session:
                key = await create_operator(session, "operator@localhost", "operator")
                await session.commit()
                return key
        finally:
            await config.get_engine().dispose()

    key = asyncio.run(mint())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return path


@click.command()
@click.pass_obj
def up(settings: Settings) -> None:
    """Migrate, create the first operator key, and serve the API on the embedded default."""
    import uvicorn

    from loraplex.db import migrate

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings.database_url)
    key_path = ensure_operator_key(settings)
    url = f"http://{settings.host}:{settings.port}"
    click.echo(f"Loraplex is listening on {url}  (API docs: {url}/schema)")
    click.echo(
        f'Operator API key: {key_path}  (curl -H "Authorization: Bearer $(cat {key_path})" '
        f"{url}/api/v1/tenants)"
    )
    uvicorn.run(
        "loraplex.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        log_level="warning",
    )
