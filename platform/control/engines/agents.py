"""`/api/v1/agents/engines/{name}`: engines that register themselves through their agent.

`loraplex agent --register-with <API URL>` PUTs its engine here on start and again every
`heartbeat_s` (the same body: registration and heartbeat are one idempotent call), and
DELETEs it on shutdown. Its node credential authenticates it (no API key), and only for the
engine name it was minted for (auth/node_credentials.py): the access guard refuses any other
`{name}` before these handlers run.
An engine whose agent goes silent leaves rotation, then is forgotten (agent_liveness.py).
A heartbeat whose `engine_generation` changed means the engine restarted: this replica's
placement loads again what it held, pinned versions first.
"""

from __future__ import annotations

import msgspec
from advanced_alchemy.extensions.litestar import providers
from litestar import Controller, delete, put

from loraplex.auth import access
from loraplex.control.engines.schemas import AgentRegistered, AgentRegistration, EngineName
from loraplex.control.engines.service import EngineService
from loraplex.errors import InvalidInput
from loraplex.serving.live import LivePlacement
from loraplex.serving.registry import EngineRegistry
from loraplex.settings import Settings

AGENT_ENGINE = "/api/v1/agents/engines/{name:str}"


class AgentController(Controller):
    """Self-registration, heartbeat and deregistration of agents' engines."""

    tags = ["agents"]
    dependencies = providers.create_service_dependencies(EngineService, key="engines")

    @put(AGENT_ENGINE, operation_id="RegisterAgentEngine", opt=access.AGENT)
    async def register(
        self,
        name: str,
        data: AgentRegistration,
        engines: EngineService,
        registry: EngineRegistry | None,
        placement: LivePlacement | None,
        settings: Settings,
    ) -> AgentRegistered:
        """Register the agent's engine, or take its heartbeat."""
        valid_name(name)
        engine, restarted = await engines.register_from_agent(
            name, data, registry, settings.secret_key
        )
        await engines.repository.session.commit()
        if restarted and placement is not None:
            await placement.engine_restarted(str(engine.id))
        return AgentRegistered(engine.id, settings.agent_heartbeat_s, restarted)

    @delete(AGENT_ENGINE, operation_id="DeregisterAgentEngine", opt=access.AGENT)
    async def deregister(
        self, name: str, engines: EngineService, registry: EngineRegistry | None
    ) -> None:
        """The agent is shutting down: take its engine out now."""
        await engines.deregister_agent(name, registry)


def valid_name(name: str) -> None:
    """A 400 naming the parameter for an engine name the registry would refuse."""
    try:
        msgspec.convert(name, EngineName)
    except msgspec.ValidationError as exc:
        raise InvalidInput(
            "name must be lowercase letters, digits, '.', '_' or '-' (at most 100)", param="name"
        ) from exc
