"""A fine-tuning job's money: the price of its training tokens (the training file's tokens
x epochs), reserved from the tenant's and the creating key's budgets when the job is
created, and written to the spend record in the same transaction as the job.

The hold is kept in Redis beside the budget counters (`keep_hold`) until the job ends; then
`settle_job` charges the tokens it trained (a succeeded job's `trained_tokens`; a failed or
cancelled one's share of its steps done, 0 when none is known), gives the rest back to the
budgets once (the settle script drops the kept hold as it settles) and takes it off the
spend record.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.budgets.money import Price, cost
from loraplex.db.models import DatasetFile, FineTuneJob, JobStatus
from loraplex.db.models.budgets import NOBODY
from loraplex.db.models.finetune import TERMINAL
from loraplex.finetune.schemas import AUTO
from loraplex.gateway.admission.budgets import BudgetGuard
from loraplex.gateway.admission.policy import DAY_S
from loraplex.gateway.admission.service import REDIS_ERRORS, TenantQuotas, redis_deadline
from loraplex.gateway.admission.ticket import SpendHold
from loraplex.gateway.usage import SpendRow, spend_upsert

log = logging.getLogger("loraplex.finetune")

TRAINING = "training"
KEPT_S = 33 * DAY_S  # outlives a month's budget counter (its period and a day)


def training_tokens(training: DatasetFile, hyperparameters: Mapping[str, Any]) -> int:
    """The tokens a job trains on: the file's tokens (counted at upload) x its epochs."""
    epochs = hyperparameters.get("n_epochs", "auto")
    epochs = AUTO["n_epochs"] if epochs == "auto" else int(epochs)
    return max(0, int(training.details.get("tokens", 0))) * max(1, epochs)


async def reserve_training(
    budgets: BudgetGuard | None,
    tenant_id: UUID,
    key_id: UUID | None,
    limits: Mapping[str, int],
    base_model: str,
    tokens: int,
) -> SpendHold | None:
    """The job's hold, or `BudgetExceeded` raised (nothing without budgets)."""
    if budgets is None:
        return None
    hold = await budgets.reserve(tenant_id, limits, base_model, key_id=key_id, training=tokens)
    if hold is not None:
        hold.use(training=tokens)  # the job is charged what it reserved
    return hold


async def give_back(budgets: BudgetGuard | None, hold: SpendHold | None) -> None:
    """The job was not created after all: its whole reservation goes back."""
    if budgets is not None and hold is not None:
        hold.use()
        await budgets.settle(hold)


async def record_training_spend(
    session: AsyncSession,
    tenant_id: UUID,
    key_id: UUID | None,
    base_model: str,
    tokens: int,
    hold: SpendHold | None,
    *,
    refund: bool = False,
) -> None:
    """Add the job's charge to the spend record (or take it off again with `refund`), in
    the caller's transaction."""
    sign = -1 if refund else 1
    amount = sign * ((hold.actual or 0) if hold is not None else 0)
    await _spend_row(session, tenant_id, key_id, base_model, sign, sign * tokens, amount)


async def _spend_row(
    session: AsyncSession,
    tenant_id: UUID,
    key_id: UUID | None,
    base_model: str,
    requests: int,
    tokens: int,
    amount: int,
) -> None:
    now = datetime.now(UTC)
    row = SpendRow(
        tenant_id=tenant_id,
        day=now.replace(hour=0, minute=0, second=0, microsecond=0),
        model=f"fine-tune:{base_model}",
        api_key_id=key_id or NOBODY,
        adapter_id=NOBODY,
        base_model=base_model,
        kind=TRAINING,
        requests=requests,
        prompt_tokens=0,
        completion_tokens=0,
        training_tokens=tokens,
        amount_micros=amount,
    )
    await session.execute(spend_upsert(session.get_bind().dialect.name, [row]))


async def keep_hold(
    budgets: BudgetGuard | None,
    job: FineTuneJob,
    key_id: UUID | None,
    tokens: int,
    hold: SpendHold | None,
) -> None:
    """Keep the job's hold in Redis until the job ends (`settle_job`). Redis away: the job
    keeps its whole charge."""
    if budgets is None or hold is None:
        return
    price = hold.price
    fields = {
        "reserved": str(hold.reserved),
        "tokens": str(tokens),
        "price": json.dumps([price.prompt, price.completion, price.training, price.discount_bp]),
        "counters": json.dumps(list(hold.counters)),
        "key_id": str(key_id or ""),
        "base_model": job.model,
    }
    quotas = budgets.quotas
    try:
        async with redis_deadline(quotas.timeout_s):
            await quotas.limiter.keep_job_spend(str(job.tenant_id), str(job.id), fields, KEPT_S)
    except REDIS_ERRORS as exc:
        log.warning("keeping the spend hold of job %s failed: %s", job.id, exc)


def tokens_trained(job: FineTuneJob, planned: int) -> int:
    """What an ended job trained: a succeeded job's count; a failed or cancelled one's
    share of its planned tokens by the steps it finished (0 when no step is known)."""
    if job.status == JobStatus.SUCCEEDED:
        return max(0, job.trained_tokens)
    progress = job.progress or {}
    step, total = progress.get("step"), progress.get("total_steps")
    if not isinstance(step, int) or not isinstance(total, int) or total <= 0:
        return 0
    return planned * min(max(step, 0), total) // total


async def settle_job(
    quotas: TenantQuotas | None, session: AsyncSession, job: FineTuneJob
) -> int | None:
    """Charge an ended job what it trained: give the rest of its hold back to the budgets
    (once: a second call finds no hold) and take it off the spend record; commits.

    Returns the micro-units given back (negative: taken), or None when there was nothing
    to settle (not ended, settled already, never kept, or Redis away: the whole charge stays).
    """
    if quotas is None or job.status not in TERMINAL:
        return None
    tenant, job_id = str(job.tenant_id), str(job.id)
    try:
        async with redis_deadline(quotas.timeout_s):
            kept = await quotas.limiter.kept_job_spend(tenant, job_id)
            if not kept:
                return None
            planned, reserved = int(kept["tokens"]), int(kept["reserved"])
            trained = tokens_trained(job, planned)
            prompt, completion, training, discount = json.loads(kept["price"])
            actual = cost(Price(prompt, completion, training, discount), training=trained)
            counters = json.loads(kept["counters"])
            if not await quotas.limiter.settle_job_spend(
                tenant, job_id, counters, reserved - actual
            ):
                return None
    except REDIS_ERRORS as exc:
        log.warning("settling the spend of job %s failed: %s", job.id, exc)
        return None
    key_id = UUID(kept["key_id"]) if kept["key_id"] else None
    await _spend_row(
        session, job.tenant_id, key_id, kept["base_model"], 0, trained - planned, actual - reserved
    )
    await session.commit()
    return reserved - actual
