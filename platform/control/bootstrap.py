"""Admin tasks run from the CLI, on the same services as the API."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.principal import CLI_ACTOR
from loraplex.control.base_models.service import BaseModelIn, BaseModelService
from loraplex.control.keys.service import ApiKeyService
from loraplex.control.users.service import UserCreate, UserService
from loraplex.db.models import UserRole
from loraplex.errors import NotFound


async def create_operator(session: AsyncSession, email: str, name: str) -> str:
    """Create (or reuse) an operator user and mint an operator key; returns the secret."""
    users = UserService(session=session)
    user = await users.get_one_or_none(email=email.lower())
    if user is None:
        user = await users.create_user(
            None, UserCreate(email=email, name=name, role=UserRole.OPERATOR), CLI_ACTOR
        )
    created = await ApiKeyService(session=session).create_operator_key(
        f"{name} (cli)", CLI_ACTOR, user.id
    )
    return created.key


async def set_password(session: AsyncSession, email: str, password: str) -> None:
    """Give an existing user (an operator, say) a console password (argon2id)."""
    users = UserService(session=session)
    user = await users.get_one_or_none(email=email.lower())
    if user is None:
        raise NotFound(f"no user with email '{email}'")
    await users.set_password(user, password, CLI_ACTOR)


async def register_base_model(session: AsyncSession, model_dir: Path, name: str | None) -> str:
    """Register the model in `model_dir` from its config and safetensors headers."""
    from loraplex.adapters.facts import facts_to_json, read_base_model_facts

    facts = read_base_model_facts(model_dir, name)
    source = str(model_dir.resolve())  # noqa: ASYNC240 - one call from the CLI
    data = BaseModelIn(source=source, **facts_to_json(facts))
    model = await BaseModelService(session=session).register(data, CLI_ACTOR)
    return str(model.id)
