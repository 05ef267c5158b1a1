"""Request and response bodies for adapters, versions and aliases."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output

# No '@' or ':' — they separate adapter, alias and version in an inference `model` string.
# `$(?!\n)`: msgspec matches patterns with re.search, where `$` also matches before a
# trailing newline ("name\n" passed); the lookahead refuses it and, unlike `\Z`, means the
# same in the OpenAPI document's (ECMA) regexes.
AdapterName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$(?!\n)")]
ALIAS_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$(?!\n)"
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


class SampleEvalIn(Input):
    """The tenant's opt-in to keeping `sample_size` of the alias's live prompts while the
    canary runs and evaluating them on both versions with its eval (docs/design.md)."""

    eval_id: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    sample_size: Annotated[int, msgspec.Meta(ge=4, le=100)] = 20
    max_pass_rate_drop: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.05
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 256


class CanaryAnalysisIn(Input):
    """When the platform promotes or rolls back the canary by itself (docs/design.md)."""

    window_s: Annotated[int, msgspec.Meta(ge=5, le=3600)] = 600
    min_requests: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 100
    max_error_rate_diff: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.01
    max_ttft_p95_ratio: Annotated[float, msgspec.Meta(ge=1, le=100)] = 1.5
    sample_eval: SampleEvalIn | None = None  # None: no live prompt is ever kept


class CanarySet(Input):
    """Send `weight` percent of the alias's traffic to `version`; weight 0 removes the canary.
    With `analysis`, the platform promotes or rolls back the canary by itself."""

    version: VersionNumber | None = None
    weight: Weight = 0
    analysis: CanaryAnalysisIn | None = None


class AliasOut(Output):
    """An alias and where it points."""

    name: str
    version: int
    previous_version: int | None
    canary_version: int | None
    canary_weight: int
    pinned: bool  # kept resident on engines (the plan's `pinned_adapters` counts these)
    updated_at: datetime
    canary_analysis: dict[str, Any] | None = None  # the policy; None: no automatic analysis
    canary_started_at: datetime | None = None
    # The latest analysis: verdict (promote, rollback, wait), reasons, figures, when; it stays
    # after the analysis ends the canary, so the outcome can be read.
    canary_decision: dict[str, Any] | None = None


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
