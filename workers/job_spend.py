"""Settles an ended job's money from a worker: the job's hold kept in Redis at creation is
charged the tokens it trained and the rest given back (loraplex.finetune.spend)."""

from __future__ import annotations

import logging
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.connections import shared_redis
from loraplex.db.models import FineTuneJob
from loraplex.finetune.spend import settle_job
from loraplex.gateway.admission.service import TenantQuotas
from loraplex.settings import Settings

log = logging.getLogger("loraplex.workers")


async def settle_ended(
    settings: Settings, sessions: async_sessionmaker[AsyncSession], job_id: UUID
) -> None:
    """Settle the job's spend if it has ended; never raises (unsettled, it keeps its charge)."""
    redis = shared_redis(settings)
    try:
        quotas = TenantQuotas(redis, timeout_s=settings.ratelimit_redis_timeout_s)
        async with sessions() as session:
            job = await session.get(FineTuneJob, job_id)
            if job is not None:
                await settle_job(quotas, session, job)
    except Exception:
        log.exception("settling the spend of job %s failed", job_id)
    finally:
        await redis.aclose()
