"""Request and response bodies of an adapter import (a version fetched from a source)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec

from loraplex.api.schemas import Input, Output

# Credentials: bounded, printable, no whitespace. What a provider issues fits well within.
Credential = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=r"^[!-~]+$(?!\n)")]
S3Url = Annotated[
    str,
    msgspec.Meta(
        max_length=1100,
        pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\x00-\x1f\x7f]*)?$(?!\n)",
    ),
]
EndpointUrl = Annotated[
    str, msgspec.Meta(max_length=2048, pattern=r"^https?://[^\s/?#@]+(/[^\s?#@]*)?$(?!\n)")
]
HttpsUrl = Annotated[
    str, msgspec.Meta(max_length=4096, pattern=r"^https://[^\s/?#@]+/[^\s#]*$(?!\n)")
]
Region = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9-]{1,32}$(?!\n)")]
HubRepo = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$(?!\n)"
    ),
]
HubRevision = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$(?!\n)")]


class S3SourceIn(Input):
    """An S3 folder (`s3://bucket/prefix/`) or archive, read with the tenant's keys."""

    url: S3Url
    access_key_id: Credential
    secret_access_key: Credential
    session_token: Credential | None = None
    endpoint_url: EndpointUrl | None = None  # another S3-compatible store; default AWS
    region: Region = "us-east-1"


class HubSourceIn(Input):
    """A hub repository at a revision."""

    repo: HubRepo
    revision: HubRevision = "main"
    token: Credential | None = None


class ImportSourceIn(Input):
    """Exactly one of: `s3`, `url` (https folder or archive), `hub`."""

    s3: S3SourceIn | None = None
    url: HttpsUrl | None = None
    hub: HubSourceIn | None = None


class ImportCreate(Input):
    """Import a version from a source instead of uploading its files."""

    source: ImportSourceIn


class ImportEvent(Output):
    """One progress message of an import."""

    at: datetime
    message: str


class ImportProblem(Output):
    """Why an import failed: a short code and a message that names the problem."""

    code: str
    message: str


class ImportOut(Output):
    """An import job; `version` is set once it succeeded."""

    id: UUID
    adapter: str
    status: str
    source: dict[str, Any]  # without credentials or a URL's query
    bytes_fetched: int
    version: int | None
    error: ImportProblem | None
    events: list[ImportEvent]
    created_at: datetime
    updated_at: datetime
