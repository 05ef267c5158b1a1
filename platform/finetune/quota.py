"""The I/O side of the fine-tuning limits: a tenant's limits, its stored bytes, and refusals.

The policy is pure (`loraplex.finetune.limits`); this module reads what it needs and says which
tenant tripped which limit: `loraplex_tenant_limit_refusals_total{tenant, reason}` and a
`tenant.limit_refused` entry in the tenant's audit log. A refused request writes nothing else,
so its audit entry commits on its own (the request's transaction would roll it back with the
error); the commit also releases the tenant's row lock when the refusal came from under it.

Training files and checkpoints count against `max_storage_bytes` with the adapter versions
(`loraplex.control.adapters.versions.stored_bytes` adds them up). A checkpoint's size is its
`metrics["bytes"]`, written by the worker that stored it.
"""

from __future__ import annotations

import logging
from uuid import UUID

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.audit.limit_log import LIMIT_REFUSED
from loraplex.control.audit.service import record
from loraplex.control.quotas import effective_limits
from loraplex.db.models import DatasetFile, FineTuneCheckpoint, FineTuneJob, Tenant
from loraplex.errors import QuotaExceeded
from loraplex.finetune.limits import Refusal, with_defaults
from loraplex.observability.metrics import TenantLabeler, count_limit_refusal

log = logging.getLogger("loraplex.finetune")
CHECKPOINT_BYTES = "bytes"  # the key of a checkpoint's size in its `metrics`
# One process-wide labeler keeps the tenant label set bounded however many refusals come.
_labels = TenantLabeler()


async def plan_limits(session: AsyncSession, tenant_id: UUID) -> dict[str, int]:
    """The tenant's limits in force, fine-tuning keys its plan lacks filled by default."""
    tenant = await session.get_one(Tenant, tenant_id)
    overrides = tenant.override.limits if tenant.override else None
    return with_defaults(tenant.plan.name, effective_limits(tenant.plan.limits, overrides))


async def file_bytes(session: AsyncSession, tenant_id: UUID) -> int:
    """Bytes of the tenant's training files."""
    used = await session.scalar(
        select(func.coalesce(func.sum(DatasetFile.bytes), 0)).where(
            DatasetFile.tenant_id == tenant_id
        )
    )
    return int(used or 0)


async def checkpoint_bytes(session: AsyncSession, tenant_id: UUID) -> int:
    """Bytes of the checkpoints the tenant's jobs keep."""
    size = FineTuneCheckpoint.metrics[CHECKPOINT_BYTES].as_integer()
    used = await session.scalar(
        select(func.coalesce(func.sum(size), 0))
        .join(FineTuneJob, FineTuneJob.id == FineTuneCheckpoint.job_id)
        .where(FineTuneJob.tenant_id == tenant_id)
    )
    return int(used or 0)


async def finetune_bytes(session: AsyncSession, tenant_id: UUID) -> int:
    """Bytes of the tenant's training files and checkpoints together."""
    return await file_bytes(session, tenant_id) + await checkpoint_bytes(session, tenant_id)


def count(refusal: Refusal, tenant_id: UUID) -> None:
    """Count the refusal on `loraplex_tenant_limit_refusals_total{tenant, reason}`."""
    count_limit_refusal(refusal.limit, _labels(tenant_id))


async def refuse(
    session: AsyncSession, tenant_id: UUID, actor: str, refusal: Refusal
) -> QuotaExceeded:
    """Count and audit `refusal` (committing the entry), then return the 403 to raise."""
    count(refusal, tenant_id)
    record(
        session,
        actor,
        LIMIT_REFUSED,
        await session.get_one(Tenant, tenant_id),
        tenant_id=tenant_id,
        limit=refusal.limit,
        message=refusal.message,
    )
    await session.commit()
    log.info("tenant %s refused by %s: %s", tenant_id, refusal.limit, refusal.message)
    refused = QuotaExceeded(refusal.message, param=refusal.param)
    refused.audited = True  # recorded above, in its own transaction
    return refused
