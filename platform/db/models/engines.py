"""Inference engines (SGLang on GPUs, vLLM on CPUs) the gateway routes to."""

from __future__ import annotations

import enum
from datetime import datetime
from uuid import UUID

from advanced_alchemy.types import DateTimeUTC
from sqlalchemy import ForeignKey, String, Text
from sqlalchemy import false as sa_false
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class EngineKind(enum.StrEnum):
    """Which driver speaks to the engine."""

    SGLANG = "sglang"
    VLLM = "vllm"


class EngineStatus(enum.StrEnum):
    """Health as last observed by the poller."""

    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    DRAINING = "draining"


class Engine(Base):
    """One engine process; its rank class (`max_lora_rank`) sizes every slot."""

    __tablename__ = "engines"

    name: Mapped[str] = mapped_column(String(100), unique=True)
    url: Mapped[str] = mapped_column(String(500))
    kind: Mapped[EngineKind] = mapped_column(String(16))
    base_model_id: Mapped[UUID] = mapped_column(ForeignKey("base_models.id", ondelete="RESTRICT"))
    max_lora_rank: Mapped[int]
    gpu_slots: Mapped[int]
    host_slots: Mapped[int]
    agent_url: Mapped[str] = mapped_column(String(500), default="")
    status: Mapped[EngineStatus] = mapped_column(String(16), default=EngineStatus.UNKNOWN)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(
        DateTimeUTC(timezone=True), default=None
    )
    # Set by `loraplex agent`'s registration and heartbeats; None for an operator's engine.
    agent_seen_at: Mapped[datetime | None] = mapped_column(DateTimeUTC(timezone=True), default=None)
    # How many times the agent saw its engine come back after being down (a restart).
    engine_generation: Mapped[int] = mapped_column(default=0, server_default="0")
    # Whether the engine answers, as its agent's probe last saw it (None: the API probes).
    engine_healthy: Mapped[bool | None] = mapped_column(default=None)
    # Its agent began a drain (/drain): no new requests go there; cleared by a restart.
    draining: Mapped[bool] = mapped_column(default=False, server_default=sa_false())
    # The secret its agent registered, sealed under the secret key (auth/agent_token.py):
    # API processes send it to that agent. None: an operator's engine, or an older agent.
    agent_secret_sealed: Mapped[str | None] = mapped_column(Text, default=None)
