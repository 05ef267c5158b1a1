"""Engines: registered by operators, merged with the live view of the engine registry."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from uuid import UUID

import msgspec
from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from sqlalchemy import select

from loraplex.auth.agent_token import open_agent_secret, seal_agent_secret
from loraplex.changes import Change, announce
from loraplex.control.audit.service import record
from loraplex.control.engines.schemas import (
    AgentRegistration,
    EngineAdaptersOut,
    EngineAdmissionOut,
    EngineCreate,
    EngineLiveOut,
    EngineOut,
    LoadedAdapterOut,
)
from loraplex.db.models import Adapter, AdapterVersion, BaseModel, Engine, EngineStatus, Tenant
from loraplex.errors import Conflict, InvalidInput, NotFound
from loraplex.serving.agent_liveness import AgentState
from loraplex.serving.engines.facts_check import Claim, Problem, claim_problems, problems
from loraplex.serving.engines.reported_facts import EngineSilent
from loraplex.serving.loader import version_id_from_engine_name
from loraplex.serving.registry import EngineHandle, EngineRegistry, EngineSource, handle_from_row

if TYPE_CHECKING:
    from loraplex.gateway.gate import EngineAdmission

log = logging.getLogger("loraplex.control.engines")
FACTS_TIMEOUT_S = 5.0  # all of an engine's answers about itself, at registration


class EngineService(SQLAlchemyAsyncRepositoryService[Engine]):
    """Engines in the database; the registry (when this process runs one) adds live state."""

    class Repo(SQLAlchemyAsyncRepository[Engine]):
        """Engines."""

        model_type = Engine

    repository_type = Repo

    async def register(
        self, data: EngineCreate, actor: str, registry: EngineRegistry | None
    ) -> EngineOut:
        """Register an engine and start probing it; the name must be free."""
        _check_url(data.url, "url")
        if data.agent_url:
            _check_url(data.agent_url, "agent_url")
        base = await self._base_model_named(data.base_model)
        await check_facts(_claim(data, base), data.url, registry)
        taken_by_settings = registry is not None and any(
            h.name == data.name and not h.persisted for h in registry.all()
        )
        if taken_by_settings or await self.exists(name=data.name):
            raise Conflict(f"engine '{data.name}' is already registered", param="name")
        fields = msgspec.structs.asdict(data)
        fields.pop("base_model")
        engine = await self.create(
            Engine(**fields, base_model_id=base.id, status=EngineStatus.UNKNOWN)
        )
        record(self.repository.session, actor, "engine.register", engine, name=engine.name)
        if registry is not None:
            # Before the commit: should it fail, the registry's next database sync drops it.
            registry.add(handle_from_row(engine, base.name, registry.driver_factory, base.source))
        return _out(engine, base.name, registry)

    async def register_from_agent(
        self,
        name: str,
        data: AgentRegistration,
        registry: EngineRegistry | None,
        secret_key: str,
    ) -> tuple[Engine, bool]:
        """Register the engine of an agent, or take its heartbeat: create the row or bring
        it up to date, and note the agent as heard now. Returns the row and whether the
        engine restarted since the last heartbeat. An operator's engine of the same name
        is not taken over (409). The agent's secret is kept sealed under `secret_key`."""
        _check_url(data.url, "url")
        _check_url(data.agent_url, "agent_url")
        raise_first(claim_problems(_claim(data)))
        base = await self._base_model_named(data.base_model)
        fields = msgspec.structs.asdict(data)
        fields.pop("base_model")
        secret = fields.pop("agent_secret") or ""
        now = datetime.now(UTC)
        if registry is not None and any(h.name == name and not h.persisted for h in registry.all()):
            raise Conflict(f"engine '{name}' is listed in LORAPLEX_ENGINES", param="name")
        engine = await self.get_one_or_none(name=name)
        if engine is not None and engine.agent_seen_at is None:
            raise Conflict(f"engine '{name}' was registered by an operator", param="name")
        restarted = engine is not None and engine.engine_generation != data.engine_generation
        # Sealed again only when it changed (the agent restarted) or no longer opens (the
        # secret key changed): a heartbeat that changes nothing writes nothing new.
        held = open_agent_secret(secret_key, name, engine.agent_secret_sealed) if engine else ""
        new_secret = engine is None or secret != held
        if new_secret:
            fields["agent_secret_sealed"] = (
                seal_agent_secret(secret_key, name, secret) if secret else None
            )
        # Every API process must hear a drain, an engine going down or its agent's new
        # secret now, not at its next read of this table: the change feed makes them re-read
        # it (registry.py).
        if engine is None or new_secret or (engine.draining, engine.engine_healthy) != (
            data.draining, data.engine_healthy,
        ):  # fmt: skip
            announce(self.repository.session, Change.ENGINE_STATE, name)
        if (
            engine is None or restarted or _claim(engine) != _claim(data)
            or (engine.url, engine.base_model_id) != (data.url, base.id)
        ):  # fmt: skip
            # A heartbeat that changes nothing is not re-checked: one engine call per change.
            await check_facts(_claim(data, base), data.url, registry)
        if engine is None:
            engine = await self.create(
                Engine(
                    **fields, name=name, base_model_id=base.id, agent_seen_at=now,
                    status=EngineStatus.UNKNOWN,
                )
            )  # fmt: skip
            record(self.repository.session, f"agent:{name}", "engine.register", engine, name=name)
        else:
            for key, value in fields.items():
                setattr(engine, key, value)
            engine.base_model_id, engine.agent_seen_at = base.id, now
            engine = await self.update(engine)
        if registry is not None:
            await registry.adopt(engine, base.name, base.source)
            handle = registry.get(str(engine.id))
            if handle is not None:
                handle.agent = AgentState.FRESH  # heard now: back in rotation if it answers
        return engine, restarted

    async def deregister_agent(self, name: str, registry: EngineRegistry | None) -> None:
        """Remove the engine its agent registered (the agent is shutting down)."""
        engine = await self.get_one_or_none(name=name)
        if engine is None or engine.agent_seen_at is None:
            raise NotFound(f"no engine '{name}' registered by an agent")
        await self.deregister(engine.id, f"agent:{name}", registry)

    async def deregister(
        self, engine_id: UUID, actor: str, registry: EngineRegistry | None
    ) -> None:
        """Remove a registered engine; requests in flight on it end with an error."""
        engine = await self.get_one_or_none(id=engine_id)
        if engine is None:
            if registry is not None and registry.get(str(engine_id)) is not None:
                raise Conflict("this engine is listed in LORAPLEX_ENGINES; remove it there")
            raise NotFound("engine not found")
        record(self.repository.session, actor, "engine.deregister", engine, name=engine.name)
        await self.delete(engine.id)
        if registry is not None:
            await registry.retire(str(engine_id))

    async def list_engines(self, registry: EngineRegistry | None) -> list[EngineOut]:
        """Registered engines and those from settings, by name."""
        rows = await self.repository.session.execute(
            select(Engine, BaseModel.name).join(BaseModel, Engine.base_model_id == BaseModel.id)
        )
        views = {row.name: _out(row, base, registry) for row, base in rows.all()}
        for handle in registry.all() if registry is not None else []:
            if handle.source is EngineSource.SETTINGS:
                views.setdefault(handle.name, _settings_out(handle, registry))
        return [views[name] for name in sorted(views)]

    async def view(self, engine_id: UUID, registry: EngineRegistry | None) -> EngineOut:
        """One engine, registered or from settings."""
        row = (
            await self.repository.session.execute(
                select(Engine, BaseModel.name)
                .join(BaseModel, Engine.base_model_id == BaseModel.id)
                .where(Engine.id == engine_id)
            )
        ).first()
        if row is not None:
            return _out(row[0], row[1], registry)
        handle = registry.get(str(engine_id)) if registry is not None else None
        if handle is None:
            raise NotFound("engine not found")
        return _settings_out(handle, registry)

    async def loaded_adapters(
        self, engine_id: UUID, registry: EngineRegistry | None
    ) -> EngineAdaptersOut:
        """The adapters the engine holds, as of the poller's last look, with their owners."""
        handle = registry.get(str(engine_id)) if registry is not None else None
        if handle is None:
            await self.view(engine_id, registry)  # 404 for an unknown engine
            return EngineAdaptersOut(engine_id=engine_id, live=False, adapters=[])
        names = sorted(handle.loaded)
        owners = await self._owners(
            [v for v in map(version_id_from_engine_name, names) if v is not None]
        )
        adapters = []
        for name in names:
            version_id = version_id_from_engine_name(name)
            owner = owners.get(version_id) if version_id is not None else None
            adapters.append(owner(name) if owner else LoadedAdapterOut(name=name))
        return EngineAdaptersOut(engine_id=engine_id, live=True, adapters=adapters)

    async def _owners(self, version_ids: list[UUID]) -> dict[UUID, _Owner]:
        if not version_ids:
            return {}
        rows = await self.repository.session.execute(
            select(AdapterVersion.id, AdapterVersion.number, Adapter.name, Tenant.id, Tenant.slug)
            .join(Adapter, AdapterVersion.adapter_id == Adapter.id)
            .join(Tenant, AdapterVersion.tenant_id == Tenant.id)
            .where(AdapterVersion.id.in_(version_ids))
        )
        return {row[0]: _Owner(*row) for row in rows.all()}

    async def _base_model_named(self, name: str) -> BaseModel:
        base = await self.repository.session.scalar(select(BaseModel).where(BaseModel.name == name))
        if base is None:
            raise InvalidInput(f"unknown base model '{name}'", param="base_model")
        return base


class _Owner(msgspec.Struct, frozen=True):
    """Whose adapter version an engine-side name stands for."""

    version_id: UUID
    number: int
    adapter: str
    tenant_id: UUID
    tenant: str

    def __call__(self, name: str) -> LoadedAdapterOut:
        return LoadedAdapterOut(
            name=name,
            version_id=self.version_id,
            tenant_id=self.tenant_id,
            tenant=self.tenant,
            adapter=self.adapter,
            version=self.number,
        )


def _claim(
    described: EngineCreate | AgentRegistration | Engine, base: BaseModel | None = None
) -> Claim:
    """What a registration says about its engine; with `base`, about its model too."""
    return Claim.of(
        str(described.kind), described.max_lora_rank, described.gpu_slots, described.host_slots,
        base.name if base is not None else "", base.source if base is not None else "",
    )  # fmt: skip


def raise_first(found: list[Problem]) -> None:
    """A 400 naming the first problem's field, every problem in its message."""
    if found:
        raise InvalidInput("; ".join(p.message for p in found), param=found[0].param)


async def check_facts(claim: Claim, url: str, registry: EngineRegistry | None) -> None:
    """Refuse a claim the engine at `url` contradicts. An engine that does not answer yet is
    taken on the claim: it enters rotation only once its health probe answers."""
    raise_first(claim_problems(claim))
    if registry is None:
        return  # a process without engines to route to has no driver to ask with
    driver = registry.driver_factory(claim.kind, url)
    try:
        async with asyncio.timeout(FACTS_TIMEOUT_S):
            reported = await driver.reported_facts()
    except (EngineSilent, TimeoutError):
        return
    except Exception:  # whatever answers at an operator's URL must not turn into a 500
        log.warning("could not read the facts of the engine at %s", url, exc_info=True)
        return
    finally:
        await driver.aclose()
    raise_first(problems(claim, reported))


def _check_url(url: str, param: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"{param} must be an http(s) URL with a host", param=param)


def _live(handle: EngineHandle | None, registry: EngineRegistry | None) -> EngineLiveOut | None:
    if handle is None:
        return None
    view = registry.admission_view if registry is not None else None
    admission = view(handle) if view is not None else None
    return EngineLiveOut(
        in_rotation=handle.in_rotation,
        in_flight=handle.in_flight,
        loaded_adapters=len(handle.loaded),
        last_error=handle.last_error,
        engine_running=handle.engine_load.running if handle.engine_load else None,
        engine_waiting=handle.engine_load.waiting if handle.engine_load else None,
        admission=_admission_out(admission) if admission is not None else None,
    )


def _admission_out(view: EngineAdmission) -> EngineAdmissionOut:
    pool = view.pool
    return EngineAdmissionOut(
        places=view.places,
        prefill_places=view.prefill_places,
        source=view.source,
        pool_places=pool.places,
        pool_in_flight=pool.in_flight,
        pool_waiting=pool.waiting,
        tenants=len(pool.shares),
        ttft_slo_ms=pool.slo_ms,
    )


def _status(handle: EngineHandle) -> str:
    if handle.draining:
        return EngineStatus.DRAINING
    if handle.healthy:
        return EngineStatus.HEALTHY
    return EngineStatus.UNHEALTHY if handle.last_error else EngineStatus.UNKNOWN


def _out(engine: Engine, base_model: str, registry: EngineRegistry | None) -> EngineOut:
    handle = registry.get(str(engine.id)) if registry is not None else None
    return EngineOut(
        id=engine.id,
        name=engine.name,
        url=engine.url,
        kind=str(engine.kind),
        base_model=base_model,
        max_lora_rank=engine.max_lora_rank,
        gpu_slots=engine.gpu_slots,
        host_slots=engine.host_slots,
        agent_url=engine.agent_url,
        source=EngineSource.DATABASE,
        status=_status(handle) if handle is not None else str(engine.status),
        last_heartbeat_at=engine.last_heartbeat_at,
        agent_seen_at=engine.agent_seen_at,
        created_at=engine.created_at,
        live=_live(handle, registry),
    )


def _settings_out(handle: EngineHandle, registry: EngineRegistry | None) -> EngineOut:
    return EngineOut(
        id=UUID(handle.id),
        name=handle.name,
        url=handle.url,
        kind=handle.kind,
        base_model=handle.base_model,
        max_lora_rank=handle.max_lora_rank,
        gpu_slots=handle.gpu_slots,
        host_slots=handle.host_slots,
        agent_url=handle.agent_url,
        source=EngineSource.SETTINGS,
        status=_status(handle),
        live=_live(handle, registry),
    )
