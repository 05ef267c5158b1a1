"""A canary's sample eval: the opt-in checked when it is set, one eval run per version
started once the sample is full, and both runs' scores read for the verdict (policy.py).

A live prompt becomes the eval item `{"input": [chat messages]}`, replayed as it was through
OpenAI's `item_reference` input (`item.input`), greedily, against `<adapter>@v<stable>` and
`<adapter>@v<canary>`: ordinary eval runs of the tenant, on a worker, through the API, so
quotas, budgets and usage apply (workers/eval_run.py). Live prompts carry no reference
answer, so the eval must need none: its item schema must accept such an item and its
criteria may refer to `{{sample.*}}` and `{{item.input}}` only (`live_prompt_problem`).

The runs are found again by their metadata (`canary`: the alias and canary start). Of two
replicas starting them at once, the second waits on the alias row's lock and then finds the
first one's runs, so each canary is evaluated once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

import anyio
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.audit.service import record
from loraplex.control.canary.policy import RunScore, SampleEval, SampleScores
from loraplex.control.canary.samples import KEY_PREFIX, PromptSampler, sample_key
from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, Eval, EvalRun, RunStatus
from loraplex.errors import InvalidInput, NotFound
from loraplex.evals.checks import check_schema
from loraplex.evals.objects import EVAL, RUN
from loraplex.evals.service import EvalService, new_run
from loraplex.evals.templates import references
from loraplex.finetune.ids import parse, public

if TYPE_CHECKING:
    from loraplex.finetune.queue import JobQueue

log = logging.getLogger("loraplex.canary.sample_eval")

ACTOR = "canary-analysis"
LIVE_ITEM = {"input": [{"role": "user", "content": "a live prompt"}]}
SIDES = ("stable", "canary")


def live_prompt_problem(validator: Any, criteria: list[dict[str, Any]]) -> str | None:
    """Why an eval cannot grade live prompts (None: it can): its item schema must accept
    `{"input": [messages]}`, and its criteria may not refer to item fields beyond `input`."""
    error = next(iter(validator.iter_errors(LIVE_ITEM)), None)
    if error is not None:
        return (
            'the eval\'s item_schema must accept live prompts, items {"input": [chat '
            f"messages]}}: {error.message[:200]}"
        )
    for index, criterion in enumerate(criteria):
        for field in ("input", "reference"):
            for path in references(str(criterion.get(field) or "")):
                parts = path.split(".")
                if parts[0] == "item" and len(parts) > 1 and parts[1] != "input":
                    return (
                        f"testing_criteria[{index}] ({str(criterion.get('name'))[:60]}) refers "
                        f"to {{{{{path[:80]}}}}}, which a live prompt does not have: a sample "
                        "eval's criteria may refer to {{sample.*}} and {{item.input}} only"
                    )
    return None


async def check_sample_eval(session: AsyncSession, tenant_id: UUID, sample: SampleEval) -> None:
    """Refuse (400) a sample eval that is not the tenant's own or cannot grade live prompts."""
    param = "analysis.sample_eval.eval_id"
    try:
        evaluation = await EvalService(session).get(tenant_id, sample.eval_id)
    except NotFound:
        raise InvalidInput(f"no eval {sample.eval_id[:100]} of this tenant", param=param) from None
    validator = check_schema(evaluation.data_source_config["item_schema"], "item_schema")
    problem = live_prompt_problem(validator, evaluation.testing_criteria)
    if problem is not None:
        raise InvalidInput(problem, param=param)


def data_source(model: str, items: list[dict[str, Any]], sample: SampleEval) -> dict[str, Any]:
    """A run's `completions` data source replaying the kept prompts against `model`."""
    return {
        "type": "completions",
        "source": {"type": "file_content", "content": [{"item": item} for item in items]},
        "input_messages": {"type": "item_reference", "item_reference": "item.input"},
        "model": model,
        "sampling_params": {
            "temperature": 0,
            "max_completion_tokens": sample.max_completion_tokens,
        },
    }


def score(run: EvalRun | None) -> RunScore:
    """A run as the verdict reads it (None: the tenant deleted it)."""
    if run is None:
        return RunScore("", "deleted")
    counts = run.result_counts or {}
    return RunScore(
        public(RUN, run.id),
        str(run.status),
        int(counts.get("passed", 0)),
        int(counts.get("total", 0)),
        str((run.error or {}).get("message", ""))[:300],
    )


class SampleEvaluator:
    """Starts a canary's two sample eval runs once its sample is full, and reads them."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        samples: PromptSampler,
        queue: JobQueue | None,
    ) -> None:
        self._sessions, self._samples, self._queue = sessions, samples, queue

    async def scores(self, alias: AdapterAlias, sample: SampleEval) -> SampleScores:
        """The sample eval of the alias's canary so far; starts its runs when it is due."""
        assert alias.canary_started_at is not None
        key = sample_key(alias.id, alias.canary_started_at)
        async with self._sessions() as session:
            runs = await _runs(session, alias, sample)
        if runs is None:
            return _failed(f"the eval {sample.eval_id[:100]} no longer exists")
        if not runs:
            kept = await self._samples.count(key)
            if kept < sample.sample_size or self._queue is None:
                return SampleScores(kept)
            started = await self._start(alias, sample, key)
            if isinstance(started, str):
                return _failed(started)
            runs = started
        return SampleScores(sample.sample_size, *(score(runs.get(side)) for side in SIDES))

    async def forget(self, alias: AdapterAlias) -> None:
        """Delete the canary's kept prompts (it was decided; its runs hold what they used)."""
        if alias.canary_started_at is not None:
            await self._samples.drop(sample_key(alias.id, alias.canary_started_at))

    async def _start(
        self, alias: AdapterAlias, sample: SampleEval, key: str
    ) -> dict[str, EvalRun] | str:
        """Create both runs (unless another replica did), then queue them; or why not."""
        prompts = await self._samples.read(key, sample.sample_size)
        async with self._sessions() as session, session.begin():
            locked = await session.scalar(
                select(AdapterAlias)
                .where(
                    AdapterAlias.id == alias.id,
                    AdapterAlias.version_id == alias.version_id,
                    AdapterAlias.canary_version_id == alias.canary_version_id,
                    AdapterAlias.canary_started_at == alias.canary_started_at,
                )
                .with_for_update()
            )
            if locked is None:  # the canary ended or changed since this pass read it
                return {}
            existing = await _runs(session, alias, sample)
            if existing:
                return existing
            adapter = await session.get_one(Adapter, alias.adapter_id)
            evaluation = await session.get(Eval, _eval_uuid(sample))
            if evaluation is None or evaluation.tenant_id != adapter.tenant_id:
                return f"the eval {sample.eval_id[:100]} no longer exists"
            validator = check_schema(evaluation.data_source_config["item_schema"], "item_schema")
            items = [{"input": p} for p in prompts if validator.is_valid({"input": p})]
            if not items:
                return "no kept prompt matches the eval's item_schema"
            runs: dict[str, EvalRun] = {}
            versions = (alias.version_id, alias.canary_version_id)
            for side, version_id in zip(SIDES, versions, strict=True):
                number = await session.scalar(
                    select(AdapterVersion.number).where(AdapterVersion.id == version_id)
                )
                model = f"{adapter.name}@v{number}"
                runs[side] = new_run(
                    evaluation,
                    data_source(model, items, sample),
                    f"canary sample of {adapter.name}@{alias.name}: {side} v{number}",
                    {"canary": _tag(key), "canary_alias": f"{adapter.name}@{alias.name}",
                     "canary_side": side},
                )  # fmt: skip
            session.add_all(runs.values())
            await session.flush()
            for run in runs.values():
                record(session, ACTOR, "eval_run.create", run, tenant_id=adapter.tenant_id,
                       model=run.model, canary=f"{adapter.name}@{alias.name}")  # fmt: skip
        # committed: the worker must find each run when its task arrives
        for run in runs.values():
            await self._send(run)
        return runs

    async def _send(self, run: EvalRun) -> None:
        assert self._queue is not None
        try:  # a broker that is down can block a send for seconds: off the event loop
            await anyio.to_thread.run_sync(self._queue.run_eval, run.id)
        except Exception as exc:
            log.warning("could not queue canary sample eval run %s: %s", run.id, exc)
            async with self._sessions() as session, session.begin():
                await session.execute(
                    update(EvalRun)
                    .where(EvalRun.id == run.id, EvalRun.status == RunStatus.QUEUED)
                    .values(
                        status=RunStatus.FAILED,
                        error={
                            "code": "queue_unavailable",
                            "message": "the run could not be queued",
                        },
                    )
                )


def _tag(key: str) -> str:
    """The runs' `canary` metadata: the alias and the canary's start."""
    return key.removeprefix(KEY_PREFIX)


def _eval_uuid(sample: SampleEval) -> UUID:
    found: UUID = parse(EVAL, sample.eval_id, "eval")
    return found


def _failed(why: str) -> SampleScores:
    return SampleScores(error=why)


async def _runs(
    session: AsyncSession, alias: AdapterAlias, sample: SampleEval
) -> dict[str, EvalRun] | None:
    """The canary's sample eval runs by side ({}: not started; None: the eval is gone)."""
    assert alias.canary_started_at is not None
    try:
        eval_id = _eval_uuid(sample)
    except NotFound:
        return None
    if await session.get(Eval, eval_id) is None:
        return None
    tag = _tag(sample_key(alias.id, alias.canary_started_at))
    rows: list[EvalRun] = list(
        await session.scalars(
            select(EvalRun).where(
                EvalRun.eval_id == eval_id, EvalRun.meta["canary"].as_string() == tag
            )
        )
    )
    return {str(run.meta.get("canary_side")): run for run in rows}
