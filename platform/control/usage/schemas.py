"""Query options and response bodies for usage reports."""

from __future__ import annotations

import enum
from datetime import datetime
from uuid import UUID

from loraplex.api.schemas import Output


class GroupBy(enum.StrEnum):
    """The width of one report bucket."""

    MINUTE = "minute"
    HOUR = "hour"
    DAY = "day"


class UsageBucketOut(Output):
    """Usage of one tenant, model and adapter version within one time bucket."""

    time: datetime  # the bucket's start, UTC
    tenant_id: UUID
    model: str  # as the client asked for it
    adapter_version_id: UUID | None  # None: the request ran on a base model
    requests: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    errors: int
    cut_streams: int


class UsageTotalsOut(Output):
    """Sums over every bucket of a report."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    errors: int = 0
    cut_streams: int = 0


class UsageReportOut(Output):
    """Usage in [start, end), bucketed by `group_by`, oldest bucket first."""

    start: datetime
    end: datetime
    group_by: GroupBy
    buckets: list[UsageBucketOut]
    totals: UsageTotalsOut
