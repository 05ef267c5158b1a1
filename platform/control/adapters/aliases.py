"""Aliases: movable names for versions, with rollback and a weighted canary."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import Enum
from typing import Final
from uuid import UUID

from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from sqlalchemy import func, select

from loraplex.control.adapters.schemas import ALIAS_PATTERN, AliasOut, CanaryAnalysisIn
from loraplex.control.audit.service import record
from loraplex.control.canary.policy import CanaryPolicy, SampleEval
from loraplex.control.canary.sample_eval import check_sample_eval
from loraplex.control.tenants.service import limits_of
from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, Tenant, VersionStatus
from loraplex.errors import Conflict, InvalidInput, NotFound, QuotaExceeded

RESERVED_ALIAS = "v"  # "v<N>" addresses a version number in `model` strings


class Keep(Enum):
    """The one value of KEEP."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP  # set_canary(analysis=KEEP): the alias's analysis policy stays as is


def canary_policy(analysis: CanaryAnalysisIn) -> CanaryPolicy:
    """The analysis policy a request body asks for."""
    sample = analysis.sample_eval
    return CanaryPolicy(
        analysis.window_s,
        analysis.min_requests,
        analysis.max_error_rate_diff,
        analysis.max_ttft_p95_ratio,
        None
        if sample is None
        else SampleEval(
            sample.eval_id,
            sample.sample_size,
            sample.max_pass_rate_drop,
            sample.max_completion_tokens,
        ),
    )


class AliasService(SQLAlchemyAsyncRepositoryService[AdapterAlias]):
    """Aliases of a tenant's adapters."""

    class Repo(SQLAlchemyAsyncRepository[AdapterAlias]):
        """Adapter aliases."""

        model_type = AdapterAlias

    repository_type = Repo

    async def named(self, adapter: Adapter, name: str) -> AdapterAlias:
        """The alias `name` of `adapter`, or 404."""
        alias = await self.get_one_or_none(adapter_id=adapter.id, name=name)
        if alias is None:
            raise NotFound(f"alias '{name}' of adapter '{adapter.name}' not found")
        return alias

    async def point(self, adapter: Adapter, name: str, number: int, actor: str) -> AdapterAlias:
        """Point (promote) an alias at a ready version; the old target becomes `previous`."""
        if not re.fullmatch(ALIAS_PATTERN, name):
            raise InvalidInput(
                f"alias '{name[:70]}' must start with a-z and hold only a-z, 0-9, '_' and '-' "
                "(64 at most)",
                param="alias",
            )
        if name[:1] == RESERVED_ALIAS and name[1:].isascii() and name[1:].isdigit():
            raise InvalidInput(f"alias '{name}' would read as a version number", param="name")
        version = await self._ready_version(adapter, number, "version")
        alias = await self.get_one_or_none(adapter_id=adapter.id, name=name)
        if alias is None:
            alias = await self.create(
                AdapterAlias(adapter_id=adapter.id, name=name, version_id=version.id)
            )
        elif alias.version_id != version.id:
            alias.previous_version_id, alias.version_id = alias.version_id, version.id
            if alias.canary_version_id == version.id:  # promoting the canary ends the canary
                alias.canary_version_id, alias.canary_weight = None, 0
                alias.canary_started_at = None
            alias = await self.update(alias)
        record(
            self.repository.session,
            actor,
            "alias.set",
            alias,
            tenant_id=adapter.tenant_id,
            adapter=adapter.name,
            alias=name,
            version=number,
        )
        return alias

    async def rollback(self, adapter: Adapter, name: str, actor: str) -> AdapterAlias:
        """Swap the alias back to its previous target."""
        alias = await self.named(adapter, name)
        if alias.previous_version_id is None:
            raise Conflict(f"alias '{name}' has no previous version to roll back to")
        previous = await self.repository.session.get_one(AdapterVersion, alias.previous_version_id)
        if previous.status != VersionStatus.READY:
            raise Conflict(f"the previous version {previous.number} is {previous.status}")
        alias.version_id, alias.previous_version_id = alias.previous_version_id, alias.version_id
        alias = await self.update(alias)
        record(
            self.repository.session,
            actor,
            "alias.rollback",
            alias,
            tenant_id=adapter.tenant_id,
            adapter=adapter.name,
            alias=name,
            version=previous.number,
        )
        return alias

    async def set_canary(
        self,
        adapter: Adapter,
        name: str,
        number: int | None,
        weight: int,
        actor: str,
        *,
        analysis: CanaryPolicy | Keep | None = KEEP,
    ) -> AdapterAlias:
        """Send `weight`% of the alias's traffic to version `number` (weight 0 ends the canary);
        with an `analysis` policy the platform promotes or rolls it back (None: a person does)."""
        alias = await self.named(adapter, name)
        if isinstance(analysis, CanaryPolicy) and analysis.sample_eval is not None:
            await self._check_sample_eval(adapter.tenant_id, analysis.sample_eval)
        if analysis is not KEEP:
            alias.canary_policy = None if analysis is None else analysis.to_json()
        if weight == 0 or number is None:
            alias.canary_version_id, alias.canary_weight = None, 0
            alias.canary_started_at = None
        else:
            version = await self._ready_version(adapter, number, "version")
            if version.id == alias.version_id:
                raise InvalidInput(
                    f"version {number} is already the alias's target", param="version"
                )
            if alias.canary_version_id != version.id or alias.canary_started_at is None:
                # A new canary (or one set before analysis existed): its figures start now.
                alias.canary_started_at, alias.canary_decision = datetime.now(UTC), None
            alias.canary_version_id, alias.canary_weight = version.id, weight
        alias = await self.update(alias)
        record(
            self.repository.session,
            actor,
            "alias.canary",
            alias,
            tenant_id=adapter.tenant_id,
            adapter=adapter.name,
            alias=name,
            version=number,
            weight=weight,
            analysis=alias.canary_policy,
        )
        return alias

    async def _check_sample_eval(self, tenant_id: UUID, sample: SampleEval) -> None:
        """The tenant's own eval, able to grade live prompts, within its plan's answer bound."""
        session = self.repository.session
        await check_sample_eval(session, tenant_id, sample)
        limit = (await limits_of(session, tenant_id)).get("max_tokens_per_request")
        if limit is not None and sample.max_completion_tokens > limit:
            raise InvalidInput(
                f"analysis.sample_eval.max_completion_tokens is {sample.max_completion_tokens}; "
                f"the plan allows at most {limit} per request",
                param="analysis.sample_eval.max_completion_tokens",
            )

    async def pin(self, adapter: Adapter, name: str, actor: str) -> AdapterAlias:
        """Keep the alias's versions resident, within the plan's `pinned_adapters`."""
        alias = await self.named(adapter, name)
        if alias.pinned:
            return alias
        await self._check_pin_quota(adapter.tenant_id)
        alias.pinned = True
        return await self._record_pin(adapter, alias, actor)

    async def unpin(self, adapter: Adapter, name: str, actor: str) -> AdapterAlias:
        """Let the alias's versions be evicted again."""
        alias = await self.named(adapter, name)
        if not alias.pinned:
            return alias
        alias.pinned = False
        return await self._record_pin(adapter, alias, actor)

    async def _record_pin(self, adapter: Adapter, alias: AdapterAlias, actor: str) -> AdapterAlias:
        alias = await self.update(alias)
        record(
            self.repository.session,
            actor,
            "alias.pin" if alias.pinned else "alias.unpin",
            alias,
            tenant_id=adapter.tenant_id,
            adapter=adapter.name,
            alias=alias.name,
        )
        return alias

    async def _check_pin_quota(self, tenant_id: UUID) -> None:
        session = self.repository.session
        # Two pins of one tenant at once would both count the same pins and both pass:
        # the tenant row's lock makes them take turns until the first one commits.
        await session.execute(select(Tenant.id).where(Tenant.id == tenant_id).with_for_update())
        limit = (await limits_of(session, tenant_id)).get("pinned_adapters")
        if limit is None:
            return
        used = await session.scalar(
            select(func.count())
            .select_from(AdapterAlias)
            .join(Adapter, Adapter.id == AdapterAlias.adapter_id)
            .where(Adapter.tenant_id == tenant_id, AdapterAlias.pinned)
        )
        if (used or 0) >= limit:
            raise QuotaExceeded(
                f"the plan allows {limit} pinned adapters (pinned_adapters) and the tenant "
                f"has {used or 0} pinned; unpin an alias first",
                param="alias",
            )

    async def remove(self, adapter: Adapter, name: str, actor: str) -> None:
        """Delete an alias."""
        alias = await self.named(adapter, name)
        await self.delete(alias.id)
        record(
            self.repository.session,
            actor,
            "alias.delete",
            alias,
            tenant_id=adapter.tenant_id,
            adapter=adapter.name,
            alias=name,
        )

    async def _ready_version(self, adapter: Adapter, number: int, param: str) -> AdapterVersion:
        version = (
            await self.repository.session.execute(
                select(AdapterVersion).where(
                    AdapterVersion.adapter_id == adapter.id, AdapterVersion.number == number
                )
            )
        ).scalar_one_or_none()
        if version is None:
            raise NotFound(f"version {number} of adapter '{adapter.name}' not found")
        if version.status != VersionStatus.READY:
            raise Conflict(
                f"version {number} is {version.status}; only ready versions can be served",
                param=param,
            )
        return version

    async def to_out(self, alias: AdapterAlias) -> AliasOut:
        """The API view of an alias, with version numbers instead of ids."""
        numbers = await self._numbers(
            [alias.version_id, alias.previous_version_id, alias.canary_version_id]
        )
        return AliasOut(
            name=alias.name,
            version=numbers[alias.version_id],
            previous_version=numbers.get(alias.previous_version_id),
            canary_version=numbers.get(alias.canary_version_id),
            canary_weight=alias.canary_weight,
            pinned=alias.pinned,
            updated_at=alias.updated_at,
            canary_analysis=alias.canary_policy,
            canary_started_at=alias.canary_started_at,
            canary_decision=alias.canary_decision,
        )

    async def _numbers(self, ids: list[UUID | None]) -> dict[UUID | None, int]:
        wanted = [i for i in ids if i is not None]
        rows = await self.repository.session.execute(
            select(AdapterVersion.id, AdapterVersion.number).where(AdapterVersion.id.in_(wanted))
        )
        return {row.id: row.number for row in rows}
