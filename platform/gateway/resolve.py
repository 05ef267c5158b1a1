"""Resolves an OpenAI `model` string to what to run, within the caller's tenant.

`model` is a base model id, `"<adapter>"` (its `prod` alias, else its newest ready version),
`"<adapter>@<alias>"` (canary weight honoured) or `"<adapter>@v<N>"`. Another tenant's
adapter is simply not found — the same answer as a name that does not exist.

Resolutions are cached for `ttl_s` per (tenant, model): an alias move is seen within that
time on every replica. The canary draw happens after the cache, per request.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.canary.samples import SampleSpec, sample_spec
from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, BaseModel, VersionStatus
from loraplex.errors import InvalidInput, NotFound
from loraplex.ttl_cache import TtlCache

DEFAULT_ALIAS = "prod"

VERSION_SELECTOR = re.compile(r"v[0-9]{1,9}")


class ModelNotFound(NotFound):
    """No model of that name exists for this tenant."""

    code = "model_not_found"


@dataclass(frozen=True, slots=True)
class Target:
    """What one request runs: a base model, optionally with one adapter version."""

    model: str  # as the client named it, echoed in responses
    base_model: str
    max_context: int
    base_source: str  # where the base model's files (tokenizer) are
    version_id: UUID | None = None
    storage_key: str = ""
    files: tuple[tuple[str, str], ...] = ()  # (file name, sha256)
    rank: int | None = None
    adapter_id: UUID | None = None  # the adapter's budgets apply to it
    canary_alias_id: UUID | None = None  # drawn between an alias and its canary: counted for
    # the canary analysis (control/canary/window.py)
    prompt_sample: SampleSpec | None = None  # the tenant opted in: its prompt may be kept for
    # the canary's sample eval (control/canary/samples.py)


@dataclass(frozen=True, slots=True)
class Resolution:
    """A cached resolution: the primary target and an optional canary share."""

    primary: Target
    canary: Target | None = None
    canary_weight: int = 0

    def pick(self, user: str | None, draw: Callable[[], float] = random.random) -> Target:
        """The target for one request; sticky per `user` so a conversation keeps its version."""
        if self.canary is None or self.canary_weight <= 0:
            return self.primary
        if user:
            digest = hashlib.blake2b(
                f"{user}|{self.primary.model}".encode(), digest_size=8
            ).digest()
            bucket = int.from_bytes(digest, "big") % 100
        else:
            bucket = int(draw() * 100)
        return self.canary if bucket < self.canary_weight else self.primary


class ModelResolver:
    """Tenant-scoped model lookups with a short cache."""

    def __init__(
        self,
        session_factory: Callable[[], AsyncSession],
        ttl_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._session_factory = session_factory
        # Stale-while-revalidate: an alias move reaches a busy model one reload after `ttl_s`
        # (the requests during that reload still get the old version), and no request waits.
        self._cache: TtlCache[tuple[UUID, str], Resolution] = TtlCache(ttl_s, clock, stale_s=60.0)

    async def resolve(self, tenant_id: UUID, model: str) -> Resolution:
        """The resolution of `model` for the tenant, or ModelNotFound / InvalidInput."""
        return await self._cache.get((tenant_id, model), lambda: self._load(tenant_id, model))

    async def _load(self, tenant_id: UUID, model: str) -> Resolution:
        async with self._session_factory() as session:
            return await _resolve(session, tenant_id, model)


async def _resolve(session: AsyncSession, tenant_id: UUID, model: str) -> Resolution:
    name, _, selector = model.partition("@")
    adapter = (
        await session.execute(
            select(Adapter).where(Adapter.tenant_id == tenant_id, Adapter.name == name)
        )
    ).scalar_one_or_none()
    if adapter is None:
        if not selector:
            base = (
                await session.execute(select(BaseModel).where(BaseModel.name == model))
            ).scalar_one_or_none()
            if base is not None:
                return Resolution(_base_target(model, base))
        raise ModelNotFound(
            f"The model `{model}` does not exist or you do not have access to it.", param="model"
        )
    # ASCII digits, few enough for an int ("v²".isdigit() is true and int() refuses it).
    if VERSION_SELECTOR.fullmatch(selector):
        version = await _version(session, adapter, int(selector[1:]), model)
        return Resolution(_target(model, adapter, version))
    alias = (
        await session.execute(
            select(AdapterAlias).where(
                AdapterAlias.adapter_id == adapter.id,
                AdapterAlias.name == (selector or DEFAULT_ALIAS),
            )
        )
    ).scalar_one_or_none()
    if alias is None:
        if selector:
            raise ModelNotFound(
                f"The model `{model}` does not exist: adapter `{name}` has no alias `{selector}`.",
                param="model",
            )
        return Resolution(_target(model, adapter, await _newest_ready(session, adapter, model)))
    primary = await session.get_one(AdapterVersion, alias.version_id)
    canary = (
        await session.get(AdapterVersion, alias.canary_version_id)
        if alias.canary_version_id
        else None
    )
    canary_ok = canary is not None and canary.status == VersionStatus.READY
    analysed = alias.id if canary_ok and alias.canary_policy is not None else None
    sampled = (
        sample_spec(alias.id, alias.canary_started_at, alias.canary_policy) if analysed else None
    )
    return Resolution(
        _target(model, adapter, _ready(primary, model), analysed, sampled),
        _target(model, adapter, canary, analysed, sampled) if canary_ok and canary else None,
        alias.canary_weight if canary_ok else 0,
    )


async def _version(
    session: AsyncSession, adapter: Adapter, number: int, model: str
) -> AdapterVersion:
    version = (
        await session.execute(
            select(AdapterVersion).where(
                AdapterVersion.adapter_id == adapter.id, AdapterVersion.number == number
            )
        )
    ).scalar_one_or_none()
    if version is None:
        raise ModelNotFound(
            f"The model `{model}` does not exist: no version {number}.", param="model"
        )
    return _ready(version, model)


async def _newest_ready(session: AsyncSession, adapter: Adapter, model: str) -> AdapterVersion:
    version = (
        await session.execute(
            select(AdapterVersion)
            .where(
                AdapterVersion.adapter_id == adapter.id,
                AdapterVersion.status == VersionStatus.READY,
            )
            .order_by(AdapterVersion.number.desc())
            .limit(1)
        )
    ).scalar_one_or_none()
    if version is None:
        raise ModelNotFound(f"The model `{model}` has no ready version yet.", param="model")
    return version


def _ready(version: AdapterVersion, model: str) -> AdapterVersion:
    if version.status == VersionStatus.ARCHIVED:
        raise InvalidInput(
            f"version {version.number} of `{model}` is archived and cannot be served", param="model"
        )
    if version.status != VersionStatus.READY:
        raise InvalidInput(
            f"version {version.number} of `{model}` is {version.status}", param="model"
        )
    return version


def _base_target(model: str, base: BaseModel) -> Target:
    return Target(
        model=model, base_model=base.name, max_context=base.max_context, base_source=base.source
    )


def _target(
    model: str,
    adapter: Adapter,
    version: AdapterVersion,
    canary_alias_id: UUID | None = None,
    prompt_sample: SampleSpec | None = None,
) -> Target:
    files: dict[str, Any] = version.details.get("files", {})
    return Target(
        model=model,
        base_model=adapter.base_model.name,
        max_context=adapter.base_model.max_context,
        base_source=adapter.base_model.source,
        version_id=version.id,
        storage_key=version.storage_key,
        files=tuple((name, str(info.get("sha256", ""))) for name, info in sorted(files.items())),
        rank=version.rank,
        adapter_id=adapter.id,
        canary_alias_id=canary_alias_id,
        prompt_sample=prompt_sample,
    )
