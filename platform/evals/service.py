"""A tenant's evals and their runs: create (check, record, commit, enqueue), read, delete.

The API only records a run as `queued` and sends its id; a worker generates and grades it
(`loraplex.workers.eval_run`). A fine-tune's gate records its runs through `new_run` too,
then runs them in the training task itself.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import anyio
import msgspec
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.control.audit.service import record
from loraplex.db.models import DatasetFile, Eval, EvalRun, EvalRunItem, RunStatus
from loraplex.errors import Conflict, InvalidInput, NotFound, Unavailable
from loraplex.evals.checks import EVALS_PURPOSE, check_items, check_schema
from loraplex.evals.objects import EVAL, ITEM, RUN
from loraplex.evals.schemas import EvalCreate, FileId, JsonSchemaCheck, RunCreate
from loraplex.finetune.ids import FILE, parse, public
from loraplex.finetune.queue import JobQueue

log = logging.getLogger("loraplex.evals")
ACTIVE = (RunStatus.QUEUED, RunStatus.IN_PROGRESS)


class EvalService:
    """A tenant's evals, runs and output items."""

    def __init__(self, session: AsyncSession):
        self.session = session

    async def create(self, tenant_id: UUID, data: EvalCreate, actor: str) -> Eval:
        """Check the item schema and every criterion's schema, then record the eval."""
        check_schema(data.data_source_config.item_schema, "data_source_config.item_schema")
        for index, criterion in enumerate(data.testing_criteria):
            if isinstance(criterion, JsonSchemaCheck):
                check_schema(criterion.schema, f"testing_criteria[{index}].schema")
        names = [c.name for c in data.testing_criteria]
        if len(set(names)) != len(names):
            raise InvalidInput("testing_criteria names must be unique", param="testing_criteria")
        row = Eval(
            tenant_id=tenant_id,
            name=data.name or "",
            data_source_config=msgspec.to_builtins(data.data_source_config),
            testing_criteria=msgspec.to_builtins(data.testing_criteria),
            meta=data.metadata or {},
        )
        self.session.add(row)
        await self.session.flush()
        record(self.session, actor, "eval.create", row, tenant_id=tenant_id)
        return row

    async def get(self, tenant_id: UUID, public_id: str) -> Eval:
        """The tenant's eval, or 404 (also for another tenant's)."""
        row = await self.session.get(Eval, parse(EVAL, public_id, "eval"))
        if row is None or row.tenant_id != tenant_id:
            raise NotFound(f"No such eval: {public_id}")
        return row

    async def list(self, tenant_id: UUID, limit: int, after: str | None) -> list[Eval]:
        """The tenant's evals, newest first, after the eval `after`."""
        query = select(Eval).where(Eval.tenant_id == tenant_id)
        if after:
            query = query.where(Eval.id < parse(EVAL, after, "eval"))
        return list(await self.session.scalars(query.order_by(Eval.id.desc()).limit(limit)))

    async def delete(self, tenant_id: UUID, public_id: str, actor: str) -> Eval:
        """Delete an eval with its runs and their items."""
        row = await self.get(tenant_id, public_id)
        await self.session.delete(row)
        await self.session.flush()
        record(self.session, actor, "eval.delete", row, tenant_id=tenant_id)
        return row

    async def create_run(
        self, tenant_id: UUID, eval_id: str, data: RunCreate, actor: str, queue: JobQueue
    ) -> EvalRun:
        """Check the run's items and files, record it `queued`, commit, then enqueue it."""
        evaluation = await self.get(tenant_id, eval_id)
        source = data.data_source.source
        if isinstance(source, FileId):
            await eval_file(self.session, tenant_id, source.id)
        else:
            validator = check_schema(
                evaluation.data_source_config["item_schema"], "data_source_config.item_schema"
            )
            check_items(
                [row.item for row in source.content], validator, "data_source.source.content"
            )
        run = new_run(evaluation, msgspec.to_builtins(data.data_source), data.name, data.metadata)
        self.session.add(run)
        await self.session.flush()
        record(self.session, actor, "eval_run.create", run, tenant_id=tenant_id, model=run.model)
        await self.session.commit()  # the worker must find the run when the task arrives
        try:  # a broker that is down can block a send for seconds: off the event loop
            await anyio.to_thread.run_sync(queue.run_eval, run.id)
        except Exception as exc:
            log.warning("could not queue eval run %s: %s", run.id, exc)
            run.status = RunStatus.FAILED
            run.error = {"code": "queue_unavailable", "message": "the run could not be queued"}
            await self.session.commit()
            raise Unavailable("the eval queue is unavailable; try again shortly") from None
        return run

    async def run(self, tenant_id: UUID, eval_id: str, run_id: str) -> EvalRun:
        """One run of the tenant's eval, or 404."""
        evaluation = await self.get(tenant_id, eval_id)
        row = await self.session.get(EvalRun, parse(RUN, run_id, "eval run"))
        if row is None or row.eval_id != evaluation.id:
            raise NotFound(f"No such eval run: {run_id}")
        return row

    async def cancel_run(self, tenant_id: UUID, eval_id: str, run_id: str, actor: str) -> EvalRun:
        """Cancel a queued or running run: its worker stops sending within a second or so and
        records nothing more; a finished run is a 409."""
        run = await self.run(tenant_id, eval_id, run_id)
        moved = await self.session.execute(
            update(EvalRun)
            .where(EvalRun.id == run.id, EvalRun.status.in_(ACTIVE))
            .values(status=RunStatus.CANCELED)
        )
        if not moved.rowcount:  # type: ignore[attr-defined]
            raise Conflict(f"eval run {run_id} is already {run.status}")
        record(self.session, actor, "eval_run.cancel", run, tenant_id=tenant_id)
        await self.session.refresh(run)
        return run

    async def delete_run(self, tenant_id: UUID, eval_id: str, run_id: str, actor: str) -> EvalRun:
        """Delete a run and its output items (a running one stops as a canceled one does)."""
        run = await self.run(tenant_id, eval_id, run_id)
        await self.session.delete(run)
        await self.session.flush()
        record(self.session, actor, "eval_run.delete", run, tenant_id=tenant_id)
        return run

    async def runs(self, evaluation: Eval, limit: int, after: str | None) -> list[EvalRun]:
        """The eval's runs, newest first."""
        query = select(EvalRun).where(EvalRun.eval_id == evaluation.id)
        if after:
            query = query.where(EvalRun.id < parse(RUN, after, "eval run"))
        return list(await self.session.scalars(query.order_by(EvalRun.id.desc()).limit(limit)))

    async def items(
        self, run: EvalRun, limit: int, after: str | None, status: str | None
    ) -> list[EvalRunItem]:
        """The run's output items in data source order, after the item `after`."""
        query = select(EvalRunItem).where(EvalRunItem.run_id == run.id)
        if status:
            query = query.where(EvalRunItem.status == status)
        if after:
            query = query.where(EvalRunItem.id > parse(ITEM, after, "output item"))
        return list(await self.session.scalars(query.order_by(EvalRunItem.id).limit(limit)))

    async def item(self, run: EvalRun, item_id: str) -> EvalRunItem:
        """One output item of the run, or 404."""
        row = await self.session.get(EvalRunItem, parse(ITEM, item_id, "output item"))
        if row is None or row.run_id != run.id:
            raise NotFound(f"No such output item: {item_id}")
        return row


def new_run(
    evaluation: Eval,
    data_source: dict[str, Any],
    name: str | None,
    metadata: dict[str, str] | None,
    **links: Any,
) -> EvalRun:
    """A `queued` run of `evaluation` (`links`: the version and job a gate runs it for)."""
    return EvalRun(
        eval_id=evaluation.id,
        tenant_id=evaluation.tenant_id,
        name=name or f"{data_source['model']} on {evaluation.name or public(EVAL, evaluation.id)}",
        model=data_source["model"],
        status=RunStatus.QUEUED,
        data_source=data_source,
        meta=metadata or {},
        **links,
    )


async def eval_file(session: AsyncSession, tenant_id: UUID, file_id: str) -> DatasetFile:
    """The tenant's file uploaded with purpose `evals`, or a 400 naming it."""
    row = (
        await session.get(DatasetFile, parse(FILE, file_id, "file"))
        if file_id.startswith(FILE)
        else None
    )
    if row is None or row.tenant_id != tenant_id or row.purpose != EVALS_PURPOSE:
        raise InvalidInput(
            f"no file {file_id} uploaded with purpose '{EVALS_PURPOSE}'",
            param="data_source.source.id",
        )
    return row
