"""What the console's eval pages read: the tenant's evals with their latest runs, one run's
graded items a page at a time, and an adapter's eval scores by version.

Evals and runs are looked up through `EvalService`, so another tenant's are a 404 exactly
as in `/v1/evals`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import Adapter, AdapterVersion, Eval, EvalRun, EvalRunItem, RunStatus
from loraplex.evals.objects import EMPTY_COUNTS, EVAL, RUN, pass_rate
from loraplex.evals.service import EvalService
from loraplex.finetune.ids import public
from loraplex.web.paging import Paging

EVALS_PER_PAGE = 20
RUNS_PER_EVAL = 10  # the newest runs listed under each eval
ITEMS_PER_PAGE = 25  # graded items per page of a run
SCORED_RUNS = 500  # the newest completed runs an adapter page reads scores from
VERSION_MODEL = re.compile(r"v(\d+)")  # `name@v3` names version 3; anything else an alias


@dataclass(frozen=True)
class CriterionRate:
    """One testing criterion's outcome over a run's graded items."""

    name: str
    passed: int
    failed: int

    @property
    def rate(self) -> float | None:
        graded = self.passed + self.failed
        return self.passed / graded if graded else None


@dataclass(frozen=True)
class RunSummary:
    """A run as a list row or a page header names it."""

    id: str
    eval_id: str
    name: str
    model: str
    status: str
    created_at: datetime
    counts: dict[str, int]
    pass_rate: float | None
    criteria: list[CriterionRate]
    error: str

    @classmethod
    def of(cls, row: EvalRun) -> RunSummary:
        counts = {**EMPTY_COUNTS, **row.result_counts}
        return cls(
            public(RUN, row.id),
            public(EVAL, row.eval_id),
            row.name,
            row.model,
            str(row.status),
            row.created_at,
            counts,
            pass_rate(counts),
            _criteria(row),
            (row.error or {}).get("message", ""),
        )


@dataclass(frozen=True)
class EvalSummary:
    """One eval of the list, with its newest runs."""

    id: str
    name: str
    criteria: list[str]
    created_at: datetime
    runs: list[RunSummary]


@dataclass(frozen=True)
class EvalIndex:
    """One page of the tenant's evals, newest first."""

    items: list[EvalSummary]
    paging: Paging

    def link(self, page: int) -> str:
        return f"page={page}"


@dataclass(frozen=True)
class GradedItem:
    """One output item: the item, the prompt sent, the answer and each grader's outcome."""

    position: int
    status: str
    item: dict[str, Any]
    input: list[dict[str, Any]]
    output: str
    error: str
    results: list[dict[str, Any]]


@dataclass(frozen=True)
class RunPage:
    """A run of an eval with one page of its graded items (in data source order)."""

    eval_id: str
    eval_name: str
    run: RunSummary
    items: list[GradedItem]
    paging: Paging

    def link(self, page: int) -> str:
        return f"page={page}"


async def eval_index(session: AsyncSession, tenant_id: UUID, page: int) -> EvalIndex:
    """The page'th `EVALS_PER_PAGE` evals of the tenant, each with its newest runs."""
    query = select(Eval).where(Eval.tenant_id == tenant_id)
    total = int(await session.scalar(select(func.count()).select_from(query.subquery())) or 0)
    paging = Paging.of(page, EVALS_PER_PAGE, total)
    evals = (
        await session.scalars(
            query.order_by(Eval.id.desc()).offset(paging.offset).limit(EVALS_PER_PAGE)
        )
    ).all()
    service = EvalService(session)
    items = [
        EvalSummary(
            public(EVAL, e.id),
            e.name,
            [str(c.get("name", "")) for c in e.testing_criteria],
            e.created_at,
            [RunSummary.of(r) for r in await service.runs(e, RUNS_PER_EVAL, None)],
        )
        for e in evals
    ]
    return EvalIndex(items, paging)


async def run_page(
    session: AsyncSession, tenant_id: UUID, eval_id: str, run_id: str, page: int
) -> RunPage:
    """The tenant's run (404 for another tenant's, as the API) and a page of its items."""
    service = EvalService(session)
    evaluation = await service.get(tenant_id, eval_id)
    run = await service.run(tenant_id, eval_id, run_id)
    query = select(EvalRunItem).where(EvalRunItem.run_id == run.id)
    total = int(await session.scalar(select(func.count()).select_from(query.subquery())) or 0)
    paging = Paging.of(page, ITEMS_PER_PAGE, total)
    rows = await session.scalars(
        query.order_by(EvalRunItem.position).offset(paging.offset).limit(ITEMS_PER_PAGE)
    )
    items = [_graded(row) for row in rows]
    return RunPage(public(EVAL, evaluation.id), evaluation.name, RunSummary.of(run), items, paging)


@dataclass(frozen=True)
class ScoreCell:
    """One eval's score for one version or alias: its newest completed run, or what a
    fine-tune's gate wrote into the version's details when that run is gone."""

    pass_rate: float | None
    criteria: list[CriterionRate]
    run_id: str | None  # None: only the version's details hold the score
    promoted: bool | None  # a gate's verdict, where a gate scored it


@dataclass(frozen=True)
class ScoreRow:
    eval_id: str
    eval_name: str
    cells: list[ScoreCell | None]  # one per column


@dataclass(frozen=True)
class VersionScores:
    """Evals (rows) by version or alias (columns: `v3`, ..., then `@prod`, ...)."""

    columns: list[str]
    rows: list[ScoreRow]


async def version_scores(session: AsyncSession, adapter: Adapter) -> VersionScores:
    """The adapter's eval scores side by side: runs a gate made on a version, runs whose
    model named a version (`name@v3`) or an alias (`name@prod`), and gate scores kept in a
    version's details (`details.eval`)."""
    versions = (
        await session.execute(
            select(AdapterVersion.id, AdapterVersion.number, AdapterVersion.details)
            .where(AdapterVersion.adapter_id == adapter.id)
            .order_by(AdapterVersion.number.desc())
        )
    ).all()
    number_of = {v.id: v.number for v in versions}
    runs = (
        await session.scalars(
            select(EvalRun)
            .where(
                EvalRun.tenant_id == adapter.tenant_id,
                EvalRun.status == RunStatus.COMPLETED,
                or_(
                    EvalRun.adapter_version_id.in_(list(number_of)),
                    EvalRun.model.startswith(f"{adapter.name}@", autoescape=True),
                ),
            )
            .order_by(EvalRun.id.desc())
            .limit(SCORED_RUNS)
        )
    ).all()
    gates = {v.number: g for v in versions if isinstance(g := (v.details or {}).get("eval"), dict)}
    verdicts = {g.get("run_id"): g.get("promoted") for g in gates.values()}
    cells: dict[tuple[UUID, str], ScoreCell] = {}
    for run in runs:  # newest first: the first run of a column holds its score
        column = _column(run, adapter.name, number_of)
        if column is not None:
            cells.setdefault((run.eval_id, column), _cell(run, verdicts))
    seen_runs = {cell.run_id for cell in cells.values()}
    for number, gate in gates.items():
        if gate.get("run_id") not in seen_runs:
            eval_uuid = _eval_uuid(gate.get("eval_id"))
            if eval_uuid is not None:
                cell = ScoreCell(_rate(gate.get("pass_rate")), [], None, gate.get("promoted"))
                cells.setdefault((eval_uuid, f"v{number}"), cell)
    names = dict(
        (
            await session.execute(
                select(Eval.id, Eval.name).where(
                    Eval.tenant_id == adapter.tenant_id,
                    Eval.id.in_({eval_id for eval_id, _ in cells}),
                )
            )
        ).all()
    )
    used = {column for _, column in cells}
    columns = [f"v{v.number}" for v in versions if f"v{v.number}" in used]
    columns += sorted(c for c in used if c.startswith("@"))
    rows = [
        ScoreRow(public(EVAL, eval_id), name, [cells.get((eval_id, c)) for c in columns])
        for eval_id, name in sorted(names.items(), key=lambda kv: kv[0], reverse=True)
    ]
    return VersionScores(columns, rows)


def _column(run: EvalRun, adapter: str, number_of: dict[UUID, int]) -> str | None:
    """`v3` for a run on version 3 (by the gate's link or its model's name), `@prod` for a
    run on an alias, None for another adapter's."""
    if run.adapter_version_id in number_of:
        return f"v{number_of[run.adapter_version_id]}"
    name, _, suffix = run.model.partition("@")
    if name != adapter or not suffix:
        return None
    if match := VERSION_MODEL.fullmatch(suffix):
        number = int(match.group(1))
        return f"v{number}" if number in number_of.values() else None
    return f"@{suffix}"


def _cell(run: EvalRun, verdicts: dict[Any, Any]) -> ScoreCell:
    """A run's score, with the gate's verdict where a gate ran it."""
    counts = {**EMPTY_COUNTS, **run.result_counts}
    run_id = public(RUN, run.id)
    return ScoreCell(pass_rate(counts), _criteria(run), run_id, verdicts.get(run_id))


def _criteria(run: EvalRun) -> list[CriterionRate]:
    return [
        CriterionRate(
            str(c.get("testing_criteria", "")), int(c.get("passed", 0)), int(c.get("failed", 0))
        )
        for c in run.per_testing_criteria_results
    ]


def _rate(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _eval_uuid(value: Any) -> UUID | None:
    """The row id of an `eval_...` public id written by a gate, None if it is not one."""
    if not isinstance(value, str) or not value.startswith(EVAL):
        return None
    try:
        return UUID(hex=value.removeprefix(EVAL))
    except ValueError:
        return None


def _graded(row: EvalRunItem) -> GradedItem:
    sample = row.sample or {}
    output = "".join(
        str(m.get("content", "")) for m in sample.get("output") or [] if isinstance(m, dict)
    )
    return GradedItem(
        row.position,
        row.status,
        row.item,
        [m for m in sample.get("input") or [] if isinstance(m, dict)],
        output,
        str((sample.get("error") or {}).get("message", "")),
        row.results,
    )
