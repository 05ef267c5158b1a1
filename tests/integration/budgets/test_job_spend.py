"""A fine-tuning job's money settled when it ends, against the session's PostgreSQL and Redis:
its reservation (file tokens x epochs) is charged down to the tokens it trained, and the rest
goes back to the tenant's budget once, however often its end is settled again."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.budgets.book import BudgetBook
from loraplex.db.models import JobStatus
from loraplex.finetune.ids import JOB
from loraplex.finetune.schemas import Hyperparameters, JobCreate
from loraplex.finetune.service import JobService
from loraplex.finetune.transitions import claim, set_status
from loraplex.gateway.admission import TenantQuotas
from loraplex.gateway.admission.budgets import BudgetGuard
from loraplex.settings import Settings
from loraplex.workers.job_spend import settle_ended
from loraplex.workers.training_run import TrainingRun
from tests.conftest import Api
from tests.support.adapter_api import ensure_tiny_base
from tests.support.no_queue import NoQueue

PER_TOKEN = Decimal("0.03")  # the training price below, per token
ROWS = [{"messages": [{"role": "user", "content": f"question {i}"},
                      {"role": "assistant", "content": f"answer {i}"}]} for i in range(8)]  # fmt: skip


async def _job_with_budget(
    operator: Api, make_tenant: Any, settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> tuple[Any, str, UUID]:
    """A tenant with a daily budget and one job created (its reservation taken) as the API
    creates it, with no queue behind it: no worker of another test can move it on."""
    base = await ensure_tiny_base(operator)
    price = await operator.put(f"/api/v1/prices/{base}", json={"training": "30000"})
    assert price.status_code == 200, price.text
    tenant = await make_tenant()
    budgets = f"/api/v1/tenants/{tenant.id}/budgets"
    body = {"scope": "tenant", "period": "day", "amount": "1000"}
    budget = (await tenant.api.post(budgets, json=body)).json()
    upload = await tenant.api.post(
        "/v1/files",
        files={"file": ("t.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS), "application/jsonl")},
        data={"purpose": "fine-tune"},
    )  # fmt: skip
    data = JobCreate(model=base, training_file=upload.json()["id"],
                     hyperparameters=Hyperparameters(n_epochs=2))  # fmt: skip
    quotas = TenantQuotas(settings.redis_url, timeout_s=settings.ratelimit_redis_timeout_s)
    guard = BudgetGuard(quotas, BudgetBook(sessions))
    try:
        async with sessions() as session:
            job = await JobService(session).create(
                UUID(tenant.id),
                data,
                "test",
                NoQueue(),
                budgets=guard,  # type: ignore[arg-type]
            )
    finally:
        await quotas.aclose()
    return tenant, f"{budgets}/{budget['id']}", job.id


async def _running(sessions: async_sessionmaker[AsyncSession], job_id: UUID) -> AsyncSession:
    """The job validated and claimed by a worker; the session it was claimed in."""
    session = sessions()
    queued = (JobStatus.VALIDATING_FILES,)
    assert await set_status(session, job_id, queued, JobStatus.QUEUED)
    assert await claim(session, job_id)
    await session.commit()
    return session


async def _spent(tenant: Any, budget: str) -> Decimal:
    return Decimal((await tenant.api.get(budget)).json()["spent"])


async def _billed(tenant: Any) -> Decimal:
    return Decimal((await tenant.api.get(f"/api/v1/tenants/{tenant.id}/spend")).json()["total"])


async def test_a_job_cancelled_before_it_ran_gives_its_whole_reservation_back(
    operator: Api, make_tenant: Any, settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # fmt: skip
    tenant, budget, job_id = await _job_with_budget(operator, make_tenant, settings, sessions)
    assert await _spent(tenant, budget) > 0

    cancel = await tenant.api.post(f"/v1/fine_tuning/jobs/{JOB}{job_id.hex}/cancel")

    assert cancel.json()["status"] == "cancelled", cancel.text
    assert await _spent(tenant, budget) == 0
    assert await _billed(tenant) == 0


async def test_a_job_cancelled_while_training_is_charged_the_steps_it_trained_once(
    operator: Api, make_tenant: Any, settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # fmt: skip
    tenant, budget, job_id = await _job_with_budget(operator, make_tenant, settings, sessions)
    reserved = await _spent(tenant, budget)
    planned = reserved / PER_TOKEN
    await (await _running(sessions, job_id)).close()
    run = TrainingRun(job_id, settings, sessions, store=None)
    run.progress = {"step": 1, "total_steps": 4}

    for _ in range(2):  # a retried end settles nothing more
        await run._end(JobStatus.CANCELLED, "The job was cancelled")
        await settle_ended(settings, sessions, job_id)

    trained = planned // 4
    print(f"\ncancelled at 1/4: reserved {reserved}, charged {await _spent(tenant, budget)}")
    assert await _spent(tenant, budget) == trained * PER_TOKEN
    assert await _billed(tenant) == trained * PER_TOKEN


async def test_a_succeeded_job_is_charged_the_tokens_it_trained(
    operator: Api, make_tenant: Any, settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # fmt: skip
    tenant, budget, job_id = await _job_with_budget(operator, make_tenant, settings, sessions)
    reserved = await _spent(tenant, budget)
    trained = int(reserved / PER_TOKEN) - 7  # the trainer counted fewer than the estimate
    async with await _running(sessions, job_id) as session:  # as TrainingRun._succeed ends it
        assert await set_status(
            session, job_id, (JobStatus.RUNNING,), JobStatus.SUCCEEDED, trained_tokens=trained
        )
        await session.commit()

    for _ in range(2):
        await settle_ended(settings, sessions, job_id)

    print(f"\nsucceeded: reserved {reserved}, charged {await _spent(tenant, budget)}")
    assert await _spent(tenant, budget) == trained * PER_TOKEN
    assert await _billed(tenant) == trained * PER_TOKEN
