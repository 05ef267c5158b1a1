"""Correctness probes: a version's recorded greedy answers, and each engine's last replay."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base

BASE_SUBJECT = "base"  # the subject of the base model's own probes (no adapter)


class ProbeAnswer(Base):
    """One probe prompt and the answer greedy decoding gave at promotion, on one engine kind.

    `key` (base model, subject, engine kind, position) is unique, so two API replicas
    recording the same promotion keep only the first recording.
    """

    __tablename__ = "probe_answers"

    key: Mapped[str] = mapped_column(String(300), unique=True)
    base_model: Mapped[str] = mapped_column(String(200))
    # The version probed; None for the base model's own probes.
    version_id: Mapped[UUID | None] = mapped_column(default=None, index=True)
    engine_kind: Mapped[str] = mapped_column(String(16))
    position: Mapped[int]
    prompt: Mapped[str] = mapped_column(String(2000))
    answer: Mapped[str] = mapped_column(String(4000))
    # The engine that produced the answer: its name and the settings greedy output depends on.
    engine_config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ProbeReplay(Base):
    """The last replay of a subject's probes on one engine, and its verdict (the engines page)."""

    __tablename__ = "probe_replays"

    key: Mapped[str] = mapped_column(String(300), unique=True)  # engine id and subject
    engine_id: Mapped[str] = mapped_column(String(64), index=True)
    engine_name: Mapped[str] = mapped_column(String(200))
    version_id: Mapped[UUID | None] = mapped_column(default=None)
    verdict: Mapped[str] = mapped_column(String(16))
    matched: Mapped[int]
    differed: Mapped[int]
    unanswered: Mapped[int]
