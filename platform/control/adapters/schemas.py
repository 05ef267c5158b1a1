"""Request and response bodies for adapters, versions and aliases."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output

# No '@' or ':' — they separate adapter, alias and version in an inference `model` string.
AdapterName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
ALIAS_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
AliasName = Annotated[str, msgspec.Meta(pattern=ALIAS_PATTERN)]
Weight = Annotated[int, msgspec.Meta(ge=0, le=100)]
VersionNumber = Annotated[int, msgspec.Meta(ge=1)]


class AdapterCreate(Input):
    """A new adapter on a registered base model."""

    name: AdapterName
    base_model: str
    description: Annotated[str, msgspec.Meta(max_length=1000)] = ""


class AdapterOut(Output):
    """An adapter."""

    id: UUID
    name: str
    base_model: str
    description: str
    created_at: datetime


class VersionOut(Output):
    """One version of an adapter."""

    id: UUID
    adapter: str
    number: int
    status: str
    source: str
    rank: int | None
    alpha: float | None
    target_modules: list[str]
    size_bytes: int
    sha256: str
    error: str
    created_at: datetime


class AliasSet(Input):
    """Point an alias at a version."""

    version: VersionNumber


class CanarySet(Input):
    """Send `weight` percent of the alias's traffic to `version`; weight 0 removes the canary."""

    version: VersionNumber | None = None
    weight: Weight = 0


class AliasOut(Output):
    """An alias and where it points."""

    name: str
    version: int
    previous_version: int | None
    canary_version: int | None
    canary_weight: int
    pinned: bool  # kept resident on engines (the plan's `pinned_adapters` counts these)
    updated_at: datetime


class DownloadFile(Output):
    """One file of a version, with where to fetch it."""

    name: str
    url: str
    sha256: str
    size_bytes: int


class DownloadOut(Output):
    """How to download a version."""

    version: int
    expires_in: int
    files: list[DownloadFile]
    details: dict[str, Any] = msgspec.field(default_factory=dict)
