"""OpenAI's eval, eval.run and eval.run.output_item objects, built from rows."""

from __future__ import annotations

from typing import Any

from loraplex.db.models import Eval, EvalRun, EvalRunItem
from loraplex.evals.checks import full_schema
from loraplex.finetune.ids import public

EVAL, RUN, ITEM = "eval_", "evalrun_", "outputitem_"
EMPTY_COUNTS = {"total": 0, "errored": 0, "failed": 0, "passed": 0}


def eval_object(row: Eval) -> dict[str, Any]:
    """OpenAI's eval object."""
    config = row.data_source_config
    return {
        "id": public(EVAL, row.id),
        "object": "eval",
        "created_at": int(row.created_at.timestamp()),
        "name": row.name,
        "metadata": row.meta,
        "data_source_config": {
            "type": "custom",
            "schema": full_schema(
                config["item_schema"], config.get("include_sample_schema", False)
            ),
        },
        "testing_criteria": row.testing_criteria,
    }


def run_object(row: EvalRun) -> dict[str, Any]:
    """OpenAI's eval.run object; `pass_rate` (items passing every criterion) is Loraplex's."""
    counts = {**EMPTY_COUNTS, **row.result_counts}
    return {
        "id": public(RUN, row.id),
        "object": "eval.run",
        "eval_id": public(EVAL, row.eval_id),
        "created_at": int(row.created_at.timestamp()),
        "name": row.name,
        "model": row.model,
        "status": row.status,
        "data_source": row.data_source,
        "metadata": row.meta,
        "error": row.error or {"code": "", "message": ""},
        "result_counts": counts,
        "per_testing_criteria_results": row.per_testing_criteria_results,
        "per_model_usage": row.per_model_usage,
        "report_url": "",
        "pass_rate": pass_rate(counts),
    }


def pass_rate(counts: dict[str, int]) -> float | None:
    """Items that passed over all items (errored ones count as not passed); None if none ran."""
    return counts["passed"] / counts["total"] if counts.get("total") else None


def item_object(row: EvalRunItem, run: EvalRun) -> dict[str, Any]:
    """OpenAI's eval.run.output_item object."""
    return {
        "id": public(ITEM, row.id),
        "object": "eval.run.output_item",
        "created_at": int(row.created_at.timestamp()),
        "eval_id": public(EVAL, run.eval_id),
        "run_id": public(RUN, run.id),
        "datasource_item_id": row.position,
        "datasource_item": row.item,
        "status": row.status,
        "results": row.results,
        "sample": row.sample,
    }
