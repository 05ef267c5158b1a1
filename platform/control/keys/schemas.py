"""Request and response bodies for API keys."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output

MAX_SCOPES = 8


class KeyCreate(Input):
    """A new key for a tenant. Scopes: admin, read, inference, fine-tune."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    # A handful of scopes exist: a longer list is refused, not deduplicated (a 1 MB list of
    # "admin" made a key).
    scopes: Annotated[list[str], msgspec.Meta(max_length=MAX_SCOPES)] = msgspec.field(
        default_factory=lambda: ["inference"]
    )
    expires_at: datetime | None = None


class KeyOut(Output):
    """A key as listed: never its secret."""

    id: UUID
    tenant_id: UUID | None
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class KeyCreated(KeyOut):
    """A key just created: `key` is the secret, shown this once."""

    key: str
