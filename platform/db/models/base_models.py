"""Base models adapters are trained on, with the facts needed to validate an adapter."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from loraplex.db.orm import Base


class BaseModel(Base):
    """A served base model. `modules` maps a projection name to its [out, in] shape."""

    __tablename__ = "base_models"

    name: Mapped[str] = mapped_column(String(200), unique=True, index=True)
    source: Mapped[str] = mapped_column(String(1000))  # local path or object-store URI
    architecture: Mapped[str] = mapped_column(String(100))
    hidden_size: Mapped[int]
    num_layers: Mapped[int]
    vocab_size: Mapped[int]
    max_context: Mapped[int]
    # e.g. {"q_proj": [256, 256], "gate_proj": [512, 256]}: every decoder layer has these.
    modules: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    chat_template_sha256: Mapped[str] = mapped_column(String(64), default="")
