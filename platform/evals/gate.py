"""A fine-tune's eval gate: its request shape, its checks at job creation, and the decision.

A job with `eval_gate` moves its alias only if the new version's pass rate on the eval
reaches `threshold` and, with a `baseline` (any model the tenant may call: `name@v3`,
`name@prod`), beats the baseline's pass rate by `margin`, both measured in the same gate.
`decide` is pure: the worker (loraplex.workers.eval_gate) runs the evals and applies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.errors import InvalidInput
from loraplex.evals.checks import check_items, check_schema
from loraplex.evals.schemas import EvalGate, FileId
from loraplex.evals.service import EvalService, eval_file


async def check_gate(session: AsyncSession, tenant_id: UUID, gate: EvalGate) -> None:
    """Refuse a gate whose eval, file or items would fail the run after training."""
    evaluation = await EvalService(session).get(tenant_id, gate.eval_id)
    source = gate.data_source.source
    if isinstance(source, FileId):
        await eval_file(session, tenant_id, source.id)
        return
    validator = check_schema(evaluation.data_source_config["item_schema"], "item_schema")
    check_items(
        [row.item for row in source.content], validator, "eval_gate.data_source.source.content"
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether the alias moves, and the sentence the job's events show."""

    promote: bool
    reason: str


def decide(
    score: float | None, baseline: float | None, gate: dict[str, object], has_baseline: bool
) -> Decision:
    """The gate's verdict from the new version's and the baseline's pass rates (None: the
    run failed)."""
    threshold, margin = float(gate["threshold"]), float(gate.get("margin") or 0.0)  # type: ignore[arg-type]
    if score is None:
        return Decision(False, "the eval run of the new version failed")
    if score < threshold:
        return Decision(False, f"pass rate {score:.3f} is below the threshold {threshold:.3f}")
    if has_baseline and baseline is None:
        return Decision(False, "the eval run of the baseline failed")
    if baseline is not None and score < baseline + margin:
        return Decision(
            False,
            f"pass rate {score:.3f} does not beat the baseline's {baseline:.3f} "
            f"by the margin {margin:.3f}",
        )
    against = (
        f" and beats the baseline's {baseline:.3f} by at least {margin:.3f}"
        if (baseline is not None)
        else ""
    )
    return Decision(True, f"pass rate {score:.3f} reaches the threshold {threshold:.3f}{against}")


def gate_value(gate: EvalGate) -> dict[str, object]:
    """The gate as stored on the job."""
    return msgspec.to_builtins(gate)  # type: ignore[no-any-return]


def require_alias(alias: str | None) -> None:
    """A gate decides whether an alias moves: a job without one has nothing to gate."""
    if not alias:
        raise InvalidInput("eval_gate needs an alias to move", param="alias")
