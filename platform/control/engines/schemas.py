"""Request and response bodies for inference engines."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output
from loraplex.db.models import EngineKind

EngineName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$(?!\n)")]
Url = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
Rank = Annotated[int, msgspec.Meta(ge=1, le=1024)]
# Above what any GPU holds today (SGLang's --max-loras-per-batch is tens; host slots hold
# each adapter's weights in memory), far below what would make placement's tables huge.
GpuSlots = Annotated[int, msgspec.Meta(ge=1, le=1024)]
HostSlots = Annotated[int, msgspec.Meta(ge=1, le=8192)]
# What `loraplex agent` makes (auth/agent_token.py: 43 URL-safe characters); no less than 32.
AgentSecret = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{32,256}$(?!\n)")]


class EngineCreate(Input):
    """An engine process to route to; `max_lora_rank` is its rank class."""

    name: EngineName
    url: Url
    kind: EngineKind
    base_model: str
    max_lora_rank: Rank = 64
    gpu_slots: GpuSlots = 8  # SGLang --max-loras-per-batch, vLLM --max-loras
    host_slots: HostSlots = 32  # SGLang --max-loaded-loras, vLLM --max-cpu-loras
    agent_url: Annotated[str, msgspec.Meta(max_length=500)] = ""


class AgentRegistration(Input):
    """What `loraplex agent` registers (and re-sends as its heartbeat) for its engine."""

    url: Url  # where API processes reach the engine
    kind: EngineKind
    base_model: str
    agent_url: Url  # where API processes reach the agent
    max_lora_rank: Rank = 64
    gpu_slots: GpuSlots = 8
    host_slots: HostSlots = 32
    # Times the agent saw its engine come back after being down; a change means a restart.
    engine_generation: Annotated[int, msgspec.Meta(ge=0)] = 0
    # What the agent's own probe of the engine saw (None: an agent that does not probe, so
    # the API processes probe the engine themselves), and whether the agent is draining it.
    engine_healthy: bool | None = None
    draining: bool = False
    # The agent's own secret: API processes send it (and to this agent only) when they call
    # it. Absent from agents before it existed: they get the shared LORAPLEX_AGENT_TOKEN.
    agent_secret: AgentSecret | None = None


class AgentRegistered(Output):
    """The engine's id, and how often the API expects a heartbeat."""

    engine_id: UUID
    heartbeat_s: float
    restarted: bool  # this heartbeat reported an engine restart; placement restores it


class EngineAdmissionOut(Output):
    """The engine's places, and its base model's pool in this API process."""

    places: int  # requests it takes at once
    prefill_places: int | None  # requests waiting for a first token at once (null: no bound)
    source: str  # where `places` came from: "setting", "profile <name>", "slots" or "off"
    pool_places: int  # the places of every engine serving its base model
    pool_in_flight: int  # admitted and not finished, on those engines
    pool_waiting: int  # waiting here for a place
    tenants: int  # tenants holding a share of the pool now
    ttft_slo_ms: float | None  # the TTFT the waits are cut to (null: none known)


class EngineLiveOut(Output):
    """An engine's state as this API replica's health poller sees it."""

    in_rotation: bool
    in_flight: int
    loaded_adapters: int
    last_error: str
    # The engine's own gauges at the last probe (null when it serves no metrics).
    engine_running: float | None = None
    engine_waiting: float | None = None
    # What this API process's admission gives the engine (null before its base model's
    # first request here): docs/admission.md.
    admission: EngineAdmissionOut | None = None


class EngineOut(Output):
    """An engine; `live` is null where this process runs no health poller."""

    id: UUID
    name: str
    url: str
    kind: str
    base_model: str
    max_lora_rank: int
    gpu_slots: int
    host_slots: int
    agent_url: str
    source: str  # "database" (registered here) | "settings" (LORAPLEX_ENGINES)
    status: str  # "healthy" | "unhealthy" | "unknown" (| "draining")
    live: EngineLiveOut | None = None
    last_heartbeat_at: datetime | None = None
    agent_seen_at: datetime | None = None  # set for an engine its agent registered
    created_at: datetime | None = None


class LoadedAdapterOut(Output):
    """One adapter an engine holds, mapped back to its tenant, adapter and version."""

    name: str  # the engine-side name
    version_id: UUID | None = None  # None: a name Loraplex did not make (or since deleted)
    tenant_id: UUID | None = None
    tenant: str | None = None
    adapter: str | None = None
    version: int | None = None


class EngineAdaptersOut(Output):
    """What an engine holds, as of the poller's last look (`live` false: no poller here)."""

    engine_id: UUID
    live: bool
    adapters: list[LoadedAdapterOut]
