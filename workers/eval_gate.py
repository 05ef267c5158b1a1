"""The eval gate at the end of a gated fine-tune: run the eval on the new version (and the
baseline, in the same gate), record the scores on the version, move the alias or not.

The alias only moves through `AliasService.point`, as an ungated job's does; the decision
itself is `loraplex.evals.gate.decide`. The job's events say what each run scored and why
the alias moved or stayed.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.adapters.aliases import AliasService
from loraplex.db.models import Adapter, AdapterVersion, Eval, EvalRun, FineTuneJob
from loraplex.evals.gate import Decision, decide
from loraplex.evals.objects import RUN, pass_rate
from loraplex.evals.service import new_run
from loraplex.finetune.ids import JOB, public
from loraplex.finetune.transitions import add_event
from loraplex.settings import Settings
from loraplex.workers.eval_run import EvalRunner


async def run_gate(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    store: Any,
    job_id: UUID,
    version_id: UUID,
) -> Decision:
    """Evaluate the job's new version (and its baseline) and apply the gate's decision."""
    async with sessions() as session:
        job = await session.get_one(FineTuneJob, job_id)
        version = await session.get_one(AdapterVersion, version_id)
        adapter = await session.get_one(Adapter, version.adapter_id)
        gate = dict(job.eval_gate or {})
        evaluation = await session.get_one(Eval, parse_eval_id(gate["eval_id"]))
        model = f"{adapter.name}@v{version.number}"
        runs = [_run(evaluation, gate, model, job, version_id)]
        if gate.get("baseline"):
            runs.append(_run(evaluation, gate, str(gate["baseline"]), job, None))
        session.add_all(runs)
        await session.flush()
        run_ids = [run.id for run in runs]
        await add_event(
            session,
            job_id,
            f"Evaluating {model} on {gate['eval_id']}"
            + (f" against the baseline {gate['baseline']}" if gate.get("baseline") else ""),
        )
        await session.commit()
    runner = EvalRunner(settings, sessions, store)
    await asyncio.gather(*(runner.run(run_id) for run_id in run_ids))
    return await _apply(sessions, job_id, version_id, run_ids, gate)


def parse_eval_id(public_id: str) -> UUID:
    """The row id of an eval the job's creation already found."""
    return UUID(hex=public_id.removeprefix("eval_"))


def _run(
    evaluation: Eval, gate: dict[str, Any], model: str, job: FineTuneJob, version_id: UUID | None
) -> EvalRun:
    data_source = {**gate["data_source"], "model": model}
    return new_run(
        evaluation,
        data_source,
        f"{model} (gate of {public(JOB, job.id)})",
        None,
        adapter_version_id=version_id,
        fine_tune_job_id=job.id,
    )


async def _apply(
    sessions: async_sessionmaker[AsyncSession],
    job_id: UUID,
    version_id: UUID,
    run_ids: list[UUID],
    gate: dict[str, Any],
) -> Decision:
    async with sessions() as session:
        runs = [await session.get_one(EvalRun, run_id) for run_id in run_ids]
        scores = [_score(run) for run in runs]
        for run, score in zip(runs, scores, strict=True):
            await add_event(
                session,
                job_id,
                _scored(run, score),
                kind="metrics",
                data={
                    "run_id": public(RUN, run.id),
                    "model": run.model,
                    "pass_rate": score,
                    "result_counts": run.result_counts,
                },
            )
        decision = decide(
            scores[0], scores[1] if len(scores) > 1 else None, gate, has_baseline=len(scores) > 1
        )
        version = await session.get_one(AdapterVersion, version_id)
        version.details = {
            **version.details,
            "eval": {
                "eval_id": gate["eval_id"],
                "run_id": public(RUN, runs[0].id),
                "pass_rate": scores[0],
                "baseline_pass_rate": scores[1] if len(scores) > 1 else None,
                "promoted": decision.promote,
            },
        }
        job = await session.get_one(FineTuneJob, job_id)
        adapter = await session.get_one(Adapter, version.adapter_id)
        if decision.promote and job.alias:
            await AliasService(session=session).point(
                adapter, job.alias, version.number, f"job:{public(JOB, job_id)}"
            )
            await add_event(
                session, job_id, f"Alias {job.alias} moved to v{version.number}: {decision.reason}"
            )
        else:
            await add_event(
                session, job_id, f"Alias {job.alias} stays: {decision.reason}", level="warn"
            )
        await session.commit()
    return decision


def _score(run: EvalRun) -> float | None:
    return pass_rate(run.result_counts) if run.status == "completed" else None


def _scored(run: EvalRun, score: float | None) -> str:
    if score is None:
        reason = (run.error or {}).get("message", "it did not complete")
        return f"Eval run {public(RUN, run.id)} of {run.model} failed: {reason}"
    counts = run.result_counts
    return (
        f"Eval run {public(RUN, run.id)} of {run.model}: pass rate {score:.3f} "
        f"({counts.get('passed', 0)} of {counts.get('total', 0)} passed)"
    )
