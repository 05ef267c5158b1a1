"""One eval run on a worker: claim it, read its items, generate through the API, grade, store.

The run moves `queued -> in_progress` by compare-and-set, so a duplicate delivery does
nothing. Items are generated a few at a time (`CONCURRENCY`) with a key of the tenant minted
for the run and revoked when it ends (expiring on its own by the task's time limit if this
worker dies first). Per-item results are written once, with the counts, in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
import httpx
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.auth.principal import Scope
from loraplex.control.keys.schemas import KeyCreate
from loraplex.control.keys.service import ApiKeyService
from loraplex.db.models import DatasetFile, Eval, EvalRun, EvalRunItem, RunStatus
from loraplex.db.models.keys import EVAL_USAGE
from loraplex.errors import InvalidInput
from loraplex.evals.checks import check_items, check_schema, parse_lines
from loraplex.evals.generate import RunRefused, Sample, request_body, sample, sample_context
from loraplex.evals.graders import grade
from loraplex.evals.objects import RUN
from loraplex.finetune.ids import public
from loraplex.settings import Settings

log = logging.getLogger("loraplex.workers")

CANCEL_POLL_S = 1.0  # how soon a canceled run stops sending requests
CONCURRENCY = 4  # requests in flight per run: the tenant's own limits still apply on top
RUN_TIME_LIMIT_S = 3600


class EvalRunner:
    """Runs claimed eval runs to their end state."""

    def __init__(self, settings: Settings, sessions: async_sessionmaker[AsyncSession], store: Any):
        self.settings, self.sessions, self.store = settings, sessions, store

    async def run(self, run_id: UUID) -> bool:
        """Run `run_id` if it is still queued; False when another delivery already took it."""
        async with self.sessions() as session:
            claimed = await _move(session, run_id, RunStatus.QUEUED, RunStatus.IN_PROGRESS)
            await session.commit()
        if not claimed:
            return False
        try:
            await self._run(run_id)
        except RunRefused as exc:
            await self._fail(run_id, exc.code, exc.message)
        except InvalidInput as exc:
            await self._fail(run_id, "invalid_data_source", exc.detail)
        except Exception:  # any failure must end the run, never leave it in progress
            log.exception("eval run %s failed", run_id)
            await self._fail(run_id, "run_failed", "the run could not complete; try again")
        return True

    async def _run(self, run_id: UUID) -> None:
        async with self.sessions() as session:
            run = await session.get_one(EvalRun, run_id)
            evaluation = await session.get_one(Eval, run.eval_id)
            items = await self._items(session, run, evaluation)
        async with self._tenant_key(run) as key:
            samples = await self._generate(run, items, key)
        await self._finish(run, evaluation, items, samples)

    async def _items(
        self, session: AsyncSession, run: EvalRun, evaluation: Eval
    ) -> list[dict[str, Any]]:
        source = run.data_source["source"]
        if source["type"] == "file_content":  # checked against the item schema at creation
            return [row["item"] for row in source["content"]]
        row = await session.get(DatasetFile, UUID(hex=source["id"].removeprefix("file-")))
        if row is None or row.tenant_id != run.tenant_id:
            raise InvalidInput(f"the file {source['id']} no longer exists")
        with tempfile.TemporaryDirectory(prefix="loraplex-eval-") as tmp:
            path = Path(tmp) / "items.jsonl"
            await anyio.to_thread.run_sync(self.store.get_file, row.storage_key, path, row.sha256)
            with path.open("rb") as handle:
                items = parse_lines(iter(handle), "data_source.source.id")
        schema = evaluation.data_source_config["item_schema"]
        check_items(items, check_schema(schema, "item_schema"), "data_source.source.id")
        return items

    @contextlib.asynccontextmanager
    async def _tenant_key(self, run: EvalRun) -> AsyncIterator[str]:
        """An inference key of the run's tenant, alive for the run (at most the task's limit);
        its tokens are the tenant's spend of kind "eval", under its quotas and budgets."""
        actor = f"eval_run:{public(RUN, run.id)}"
        expires = datetime.now(UTC) + timedelta(seconds=RUN_TIME_LIMIT_S)
        async with self.sessions() as session:
            created = await ApiKeyService(session=session).create_tenant_key(
                run.tenant_id,
                KeyCreate(
                    name=f"eval run {public(RUN, run.id)}"[:100],
                    scopes=[Scope.INFERENCE],
                    expires_at=expires,
                ),
                actor,
                usage_kind=EVAL_USAGE,
            )
            await session.commit()
        try:
            yield created.key
        finally:
            async with self.sessions() as session:
                await ApiKeyService(session=session).revoke(run.tenant_id, created.id, actor)
                await session.commit()

    async def _generate(self, run: EvalRun, items: list[dict[str, Any]], key: str) -> list[Sample]:
        gate = asyncio.Semaphore(CONCURRENCY)
        base_url = api_url(self.settings)
        headers = {"Authorization": f"Bearer {key}"}

        stopped = asyncio.Event()  # the run was canceled or deleted: send nothing more

        async def one(client: httpx.AsyncClient, item: dict[str, Any]) -> Sample:
            async with gate:
                if stopped.is_set():
                    return Sample([], error={"code": "canceled", "message": "the run was canceled"})
                return await sample(client, request_body(run.data_source, item))

        watch = asyncio.create_task(self._watch(run.id, stopped))
        try:
            async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=300) as client:
                return list(await asyncio.gather(*(one(client, item) for item in items)))
        finally:
            watch.cancel()

    async def _watch(self, run_id: UUID, stopped: asyncio.Event) -> None:
        """Set `stopped` once the run is no longer in progress (canceled or deleted)."""
        while not stopped.is_set():
            await asyncio.sleep(CANCEL_POLL_S)
            async with self.sessions() as session:
                status = await session.scalar(select(EvalRun.status).where(EvalRun.id == run_id))
            if status != RunStatus.IN_PROGRESS:
                stopped.set()

    async def _finish(
        self, run: EvalRun, evaluation: Eval, items: list[dict[str, Any]], samples: list[Sample]
    ) -> None:
        tally = Tally([c["name"] for c in evaluation.testing_criteria])
        rows = []
        for position, (item, result) in enumerate(zip(items, samples, strict=True)):
            grades = (
                []
                if result.error
                else [
                    grade(c, sample_context(item, result, run.model))
                    for c in evaluation.testing_criteria
                ]
            )
            status = tally.add(result, [g.passed for g in grades])
            rows.append(
                EvalRunItem(
                    run_id=run.id,
                    position=position,
                    status=status,
                    item=item,
                    sample=_sample_object(result, run),
                    results=[g.as_result() for g in grades],
                )
            )
        async with self.sessions() as session:
            if await _move(
                session,
                run.id,
                RunStatus.IN_PROGRESS,
                RunStatus.COMPLETED,
                **tally.columns(run.model),
            ):
                session.add_all(rows)
            await session.commit()

    async def _fail(self, run_id: UUID, code: str, message: str) -> None:
        async with self.sessions() as session:
            await fail(session, run_id, code, message)
            await session.commit()


class Tally:
    """Counts of a run: per item, per criterion, and the tokens it used."""

    def __init__(self, names: list[str]):
        self.counts = {"total": 0, "errored": 0, "failed": 0, "passed": 0}
        self.per_criterion = {name: {"passed": 0, "failed": 0} for name in names}
        self.names = names
        self.requests = self.prompt_tokens = self.completion_tokens = 0

    def add(self, result: Sample, passed: list[bool]) -> str:
        """Count one item; its status (`pass`, `fail` or `error`)."""
        self.counts["total"] += 1
        self.requests += 1
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        if result.error:
            self.counts["errored"] += 1
            return "error"
        for name, ok in zip(self.names, passed, strict=True):
            self.per_criterion[name]["passed" if ok else "failed"] += 1
        status = "pass" if all(passed) else "fail"
        self.counts["passed" if status == "pass" else "failed"] += 1
        return status

    def columns(self, model: str) -> dict[str, Any]:
        """The run's result columns."""
        usage = {
            "model_name": model,
            "invocation_count": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "cached_tokens": 0,
        }
        return {
            "result_counts": self.counts,
            "per_testing_criteria_results": [
                {"testing_criteria": name, **counts} for name, counts in self.per_criterion.items()
            ],
            "per_model_usage": [usage],
        }


def _sample_object(result: Sample, run: EvalRun) -> dict[str, Any]:
    """OpenAI's output-item `sample`."""
    params = run.data_source.get("sampling_params") or {}
    return {
        "input": result.messages,
        "output": [] if result.error else [{"role": "assistant", "content": result.text}],
        "model": run.model,
        "finish_reason": result.finish_reason,
        "usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
            "cached_tokens": 0,
        },
        "error": result.error or {"code": "", "message": ""},
        "temperature": params.get("temperature") if params.get("temperature") is not None else 1.0,
        "top_p": params.get("top_p") if params.get("top_p") is not None else 1.0,
        "seed": params.get("seed") or 0,
        "max_completion_tokens": params.get("max_completion_tokens") or 0,
    }


def api_url(settings: Settings) -> str:
    """Where eval requests go: `eval_api_url`, else this deployment's API on `host`:`port`."""
    if settings.eval_api_url:
        return settings.eval_api_url
    wildcard = ("", "0.0.0.0", "::")  # noqa: S104 - bind addresses, never called
    host = "127.0.0.1" if settings.host in wildcard else settings.host
    return f"http://[{host}]:{settings.port}" if ":" in host else f"http://{host}:{settings.port}"


async def _move(
    session: AsyncSession, run_id: UUID, old: RunStatus, new: RunStatus, **values: Any
) -> bool:
    """Compare-and-set the run's status; True when this call moved it."""
    result = await session.execute(
        update(EvalRun)
        .where(EvalRun.id == run_id, EvalRun.status == old)
        .values(status=new, **values)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def fail(session: AsyncSession, run_id: UUID, code: str, message: str) -> bool:
    """Fail a run still in progress, with the error the tenant reads."""
    return await _move(
        session,
        run_id,
        RunStatus.IN_PROGRESS,
        RunStatus.FAILED,
        error={"code": code, "message": message},
    )


async def run_eval(context: Any, run_id: UUID) -> None:
    """The task body: run a queued eval run (a duplicate delivery does nothing)."""
    await EvalRunner(context.settings, context.sessions, context.store).run(run_id)
