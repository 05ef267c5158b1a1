"""Celery tasks: thin, named, idempotent wrappers over `loraplex.workers.jobs`.

Each takes ids, never objects; each job step starts with a status compare-and-set, so a
duplicate delivery is a no-op. Only `train` acks late: it checkpoints, so running it again
after a lost worker resumes rather than repeats.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

from celery import current_app, shared_task

from loraplex.settings import Settings
from loraplex.workers import jobs


def _settings() -> Settings:
    return current_app.conf.loraplex_settings or Settings.from_env()


@shared_task(name="loraplex.finetune.validate", time_limit=900, soft_time_limit=840)
def validate(job_id: str) -> None:
    """Check a new job's files against the base model; queue its training or fail it."""
    asyncio.run(jobs.validate(UUID(job_id), _settings()))


@shared_task(
    name="loraplex.finetune.train",
    acks_late=True,
    reject_on_worker_lost=False,
    time_limit=24 * 3600,
    soft_time_limit=24 * 3600 - 60,
)
def train(job_id: str) -> None:
    """Train a queued job (resuming from its newest checkpoint) and register the adapter."""
    asyncio.run(jobs.train(UUID(job_id), _settings()))


@shared_task(name="loraplex.finetune.reap", time_limit=120)
def reap() -> None:
    """Requeue or fail running jobs whose worker stopped sending heartbeats."""
    asyncio.run(jobs.reap(_settings()))


@shared_task(name="loraplex.adapters.reap", time_limit=1800)
def reap_adapter_objects() -> None:
    """Fail dead uploads and delete object-store files no version owns."""
    asyncio.run(jobs.reap_adapter_objects(_settings()))
