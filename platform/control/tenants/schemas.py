"""Request and response bodies for tenants, plans and quotas."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output

# `$(?!\n)`: msgspec matches patterns with re.search, where `$` also matches before a
# trailing newline ("acme\n" passed); the lookahead refuses it (and reads the same as ECMA).
Slug = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$(?!\n)",
        description="lowercase letters, digits and dashes",
    ),
]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
PlanName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$(?!\n)")]
Limits = dict[str, int]


class TenantCreate(Input):
    """A new tenant."""

    slug: Slug
    name: Name
    plan: PlanName = "free"


class TenantUpdate(Input):
    """Fields of a tenant that may change; absent fields stay as they are."""

    name: Name | None = None
    plan: PlanName | None = None


class TenantOut(Output):
    """A tenant as the API shows it."""

    id: UUID
    slug: str
    name: str
    status: str
    plan: str
    created_at: datetime
    updated_at: datetime


class QuotaOut(Output):
    """A tenant's limits: the plan's, the overrides, and what is in force."""

    tenant_id: UUID
    plan: str
    plan_limits: Limits
    overrides: Limits
    effective: Limits


class QuotaUpdate(Input):
    """Replace the tenant's overrides (an empty object clears them)."""

    overrides: Limits


class PlanIn(Input):
    """A plan to create or replace."""

    name: PlanName
    description: str = ""
    limits: Limits = msgspec.field(default_factory=dict)


class PlanOut(Output):
    """A plan."""

    id: UUID
    name: str
    description: str
    limits: Limits
