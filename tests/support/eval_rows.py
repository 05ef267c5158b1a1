"""An eval made through `/v1/evals` and graded runs written as the eval worker writes them
(a run on a version by a fine-tune's gate, a run on a model name), for the console's pages."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import select

from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import Adapter, AdapterVersion, EvalRun, EvalRunItem, RunStatus
from loraplex.evals.objects import EVAL, RUN
from loraplex.finetune.ids import parse, public
from loraplex.settings import Settings
from tests.conftest import TenantHandle

CRITERION = "right"
EVAL_BODY = {
    "name": "capitals",
    "data_source_config": {
        "type": "custom",
        "item_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
    },
    "testing_criteria": [
        {
            "type": "string_check",
            "name": CRITERION,
            "operation": "ilike",
            "input": "{{sample.output_text}}",
            "reference": "{{item.answer}}",
        }
    ],
}


async def make_eval(tenant: TenantHandle) -> str:
    """A tenant's eval, made with its key; its public id."""
    response = await tenant.api.post("/v1/evals", json=EVAL_BODY)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def graded_run(
    settings: Settings,
    tenant: TenantHandle,
    eval_id: str,
    model: str,
    answers: list[tuple[str, str, bool]],
    gate_version: tuple[str, int] | None = None,
) -> str:
    """A completed run of `model` over (question, answer, passed) items, written as the worker
    writes one; with `gate_version` (adapter, number) as a gate writes it: linked to that
    version, whose `details.eval` holds the score. Its public id."""
    passed = sum(ok for *_, ok in answers)
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        run = EvalRun(
            eval_id=parse(EVAL, eval_id, "eval"),
            tenant_id=UUID(tenant.id),
            name=f"run on {model}",
            model=model,
            status=RunStatus.COMPLETED,
            data_source={"type": "completions", "model": model},
            result_counts={
                "total": len(answers),
                "errored": 0,
                "failed": len(answers) - passed,
                "passed": passed,
            },
            per_testing_criteria_results=[
                {"testing_criteria": CRITERION, "passed": passed, "failed": len(answers) - passed}
            ],
        )
        session.add(run)
        await session.flush()
        for position, (question, answer, ok) in enumerate(answers):
            session.add(
                EvalRunItem(
                    run_id=run.id,
                    position=position,
                    status="pass" if ok else "fail",
                    item={"question": question},
                    sample=_sample(question, answer, model),
                    results=[_grade(ok)],
                )
            )
        if gate_version is not None:
            version = await _version(session, UUID(tenant.id), *gate_version)
            run.adapter_version_id = version.id
            version.details = {
                **version.details,
                "eval": {
                    "eval_id": eval_id,
                    "run_id": public(RUN, run.id),
                    "pass_rate": passed / len(answers),
                    "baseline_pass_rate": None,
                    "promoted": True,
                },
            }
        await session.commit()
        run_id = public(RUN, run.id)
    await config.get_engine().dispose()
    return run_id


def _sample(question: str, answer: str, model: str) -> dict[str, Any]:
    return {
        "input": [{"role": "user", "content": question}],
        "output": [{"role": "assistant", "content": answer}],
        "model": model,
        "error": {"code": "", "message": ""},
    }


def _grade(ok: bool) -> dict[str, Any]:
    return {"name": CRITERION, "type": "string_check", "score": float(ok), "passed": ok}


async def _version(session: Any, tenant_id: UUID, adapter: str, number: int) -> AdapterVersion:
    return (
        await session.scalars(
            select(AdapterVersion)
            .join(Adapter)
            .where(
                Adapter.tenant_id == tenant_id,
                Adapter.name == adapter,
                AdapterVersion.number == number,
            )
        )
    ).one()
