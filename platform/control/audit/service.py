"""Writing and reading the audit log."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import AuditEntry


def record(
    session: AsyncSession,
    actor: str,
    action: str,
    target: Any,
    *,
    tenant_id: UUID | None = None,
    **details: Any,
) -> None:
    """Add an audit entry to the caller's transaction, so it commits (or not) with the change."""
    session.add(
        AuditEntry(
            actor=actor,
            action=action,
            tenant_id=tenant_id,
            target_type=type(target).__name__.lower(),
            target_id=str(getattr(target, "id", target)),
            details={k: _plain(v) for k, v in details.items()},
        )
    )


def _plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class AuditService(SQLAlchemyAsyncRepositoryService[AuditEntry]):
    """Reads the audit log."""

    class Repo(SQLAlchemyAsyncRepository[AuditEntry]):
        """Audit entries."""

        model_type = AuditEntry

    repository_type = Repo
