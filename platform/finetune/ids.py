"""OpenAI-style public ids (`file-…`, `ftjob-…`) for rows keyed by UUID."""

from __future__ import annotations

from uuid import UUID

from loraplex.errors import NotFound

FILE, JOB, EVENT, CHECKPOINT = "file-", "ftjob-", "ftevent-", "ftckpt-"


def public(prefix: str, row_id: UUID) -> str:
    """The id clients see."""
    return prefix + row_id.hex


def parse(prefix: str, value: str, what: str) -> UUID:
    """The row id behind a public id, or a 404 naming what was not found."""
    if not value.startswith(prefix):
        raise NotFound(f"No such {what}: {value}")
    try:
        return UUID(hex=value[len(prefix) :])
    except ValueError as exc:
        raise NotFound(f"No such {what}: {value}") from exc
