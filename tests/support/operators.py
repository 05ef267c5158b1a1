"""An operator's API key made straight in the database of an API process the test started
(the drills' API runs in a subprocess, so there is no in-process app to ask)."""

from __future__ import annotations

import asyncio
import secrets

from loraplex.settings import Settings


def operator_key(settings: Settings, label: str) -> str:
    """A new operator's key in the database of `settings`; its e-mail starts with `label`."""
    from loraplex.control.bootstrap import create_operator
    from loraplex.db.config import sqlalchemy_config

    async def make() -> str:
        config = sqlalchemy_config(settings)
        async with config.get_session() as session:
            email = f"{label}-{secrets.token_hex(3)}@example.com"
            key = await create_operator(session, email, "o")
            await session.commit()
        await config.get_engine().dispose()
        return key

    return asyncio.run(make())
