"""Request and response bodies for inference engines."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output
from loraplex.db.models import EngineKind

EngineName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$")]
Url = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
Rank = Annotated[int, msgspec.Meta(ge=1, le=1024)]
Slots = Annotated[int, msgspec.Meta(ge=1, le=100_000)]


class EngineCreate(Input):
    """An engine process to route to; `max_lora_rank` is its rank class."""

    name: EngineName
    url: Url
    kind: EngineKind
    base_model: str
    max_lora_rank: Rank = 64
    gpu_slots: Slots = 8  # SGLang --max-loras-per-batch, vLLM --max-loras
    host_slots: Slots = 32  # SGLang --max-loaded-loras, vLLM --max-cpu-loras
    agent_url: Annotated[str, msgspec.Meta(max_length=500)] = ""


class AgentRegistration(Input):
    """What `loraplex agent` registers (and re-sends as its heartbeat) for its engine."""

    url: Url  # where API processes reach the engine
    kind: EngineKind
    base_model: str
    agent_url: Url  # where API processes reach the agent
    max_lora_rank: Rank = 64
    gpu_slots: Slots = 8
    host_slots: Slots = 32
    # Times the agent saw its engine come back after being down; a change means a restart.
    engine_generation: Annotated[int, msgspec.Meta(ge=0)] = 0


class AgentRegistered(Output):
    """The engine's id, and how often the API expects a heartbeat."""

    engine_id: UUID
    heartbeat_s: float
    restarted: bool  # this heartbeat reported an engine restart; placement restores it


class EngineLiveOut(Output):
    """An engine's state as this API replica's health poller sees it."""

    in_rotation: bool
    in_flight: int
    loaded_adapters: int
    last_error: str
    # The engine's own gauges at the last probe (null when it serves no metrics).
    engine_running: float | None = None
    engine_waiting: float | None = None
    # This API process's admission cap for the engine (adaptive: it moves with TTFT), and
    # the median TTFT it holds the engine to (null with no adaptive cap, or until a first
    # token when the target is learned), and the TTFT over which a first token is a miss of
    # its tail (null with an operator's target, or until five idle requests are in).
    in_flight_cap: int | None = None
    in_flight_cap_target_ms: float | None = None
    in_flight_cap_tail_target_ms: float | None = None
    # For a tenant the cap just shed, how many requests may wait for their first token on it at
    # once (null: none learned; it is learned from bursts whose first tokens missed the tail
    # target).
    prefill_burst_limit: int | None = None
    # How often that cap has been cut here, and the last cut ("12 -> 6: why") and when.
    in_flight_cap_cuts: int = 0
    in_flight_cap_last_cut: str = ""
    in_flight_cap_last_cut_at: datetime | None = None


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
