"""The periodic canary analysis: read both versions' figures, decide, apply the decision once.

Every API replica runs an analyst. Each pass reads the aliases whose canary has an analysis
policy, decides (policy.py) and writes the outcome with a conditional UPDATE that names the
alias's stable version, canary version and canary start: of two replicas deciding on the same
canary, only the first UPDATE matches a row, and only that replica writes the audit entry in
the same transaction. The other sees no row and does nothing, so a canary is promoted or
rolled back exactly once. A "wait" only refreshes the alias's latest analysis (no audit).

A policy with a `sample_eval` adds the eval of kept live prompts on both versions: read (and
started once the sample is full) by sample_eval.py before the decision's transaction; the
kept prompts are deleted once the canary is decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import CursorResult, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.audit.service import record
from loraplex.control.canary.policy import CanaryPolicy, Decision, SampleScores, Verdict, decide
from loraplex.control.canary.sample_eval import SampleEvaluator
from loraplex.control.canary.samples import PromptSampler
from loraplex.control.canary.window import CanaryWindow
from loraplex.db.models import Adapter, AdapterAlias, AdapterVersion, VersionStatus

if TYPE_CHECKING:
    from loraplex.finetune.queue import JobQueue

log = logging.getLogger("loraplex.canary.analyst")

ANALYSE_EVERY_S = 2.0
ACTOR = "canary-analysis"


@dataclass(frozen=True, slots=True)
class Applied:
    """A decision this replica wrote (a promote or rollback only when it won the UPDATE)."""

    alias_name: str
    decision: Decision
    won: bool


class CanaryAnalyst:
    """Analyses every analysed canary each `every_s` seconds until stopped."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        window: CanaryWindow,
        *,
        every_s: float = ANALYSE_EVERY_S,
        clock: Callable[[], float] = time.time,
        samples: PromptSampler | None = None,
        queue: JobQueue | None = None,
    ) -> None:
        self._sessions = sessions
        self._window = window
        # None: a policy's sample eval never gets its runs (its canary is never promoted)
        self._evaluator = None if samples is None else SampleEvaluator(sessions, samples, queue)
        self._every_s = every_s
        self._clock = clock
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Analyse every `every_s` seconds; a failed pass is logged and tried again."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._every_s)
            if self._stopping.is_set():
                return
            try:
                await self.analyse_all()
            except Exception:
                log.warning("canary analysis pass failed", exc_info=True)

    async def stop(self) -> None:
        """End `run()`."""
        self._stopping.set()

    async def analyse_all(self) -> list[Applied]:
        """One pass over every alias whose canary is analysed."""
        analysed = select(AdapterAlias).where(
            AdapterAlias.canary_version_id.is_not(None),
            AdapterAlias.canary_policy.is_not(None),
            AdapterAlias.canary_started_at.is_not(None),
        )
        async with self._sessions() as session:
            aliases: Sequence[AdapterAlias] = (await session.scalars(analysed)).all()
        applied = []
        # Rows written before the column stored no policy as SQL NULL hold JSON null.
        for alias in [alias for alias in aliases if alias.canary_policy]:
            try:  # one alias's failure (Redis, a row gone) must not hold up the others
                sample = await self._sample(alias)
                async with self._sessions() as session, session.begin():
                    done = await self._analyse(session, alias, sample)
                applied.append(done)
                if done.won and done.decision.verdict is not Verdict.WAIT and self._evaluator:
                    await self._evaluator.forget(alias)
            except Exception:
                log.warning("canary analysis of alias %s failed", alias.id, exc_info=True)
        return applied

    async def _sample(self, alias: AdapterAlias) -> SampleScores | None:
        """The canary's sample eval so far (None: its policy has none)."""
        assert alias.canary_policy
        policy = CanaryPolicy.from_json(alias.canary_policy)
        if policy.sample_eval is None:
            return None
        if self._evaluator is None:
            return SampleScores()
        return await self._evaluator.scores(alias, policy.sample_eval)

    async def _analyse(
        self, session: AsyncSession, alias: AdapterAlias, sample: SampleScores | None = None
    ) -> Applied:
        assert alias.canary_version_id and alias.canary_policy and alias.canary_started_at
        policy = CanaryPolicy.from_json(alias.canary_policy)
        now, started = self._clock(), alias.canary_started_at.timestamp()
        since = max(started, now - policy.window_s)
        stable = await self._window.read(alias.id, alias.version_id, since, now)
        canary = await self._window.read(alias.id, alias.canary_version_id, since, now)
        decision = decide(stable, canary, policy, now - started, sample)
        numbers = await _numbers(session, alias)
        if decision.verdict is Verdict.PROMOTE and not numbers["canary_ready"]:
            not_ready = ("the canary version is not ready",)
            decision = Decision(Verdict.WAIT, not_ready, decision.figures)
        won = await _apply(session, alias, decision, _stored(decision, numbers, now))
        if won and decision.verdict is not Verdict.WAIT:
            adapter = await session.get_one(Adapter, alias.adapter_id)
            adapter_name, tenant_id = adapter.name, adapter.tenant_id
            record(
                session, ACTOR, f"alias.canary_{decision.verdict}", alias, tenant_id=tenant_id,
                adapter=adapter_name, alias=alias.name, stable=numbers["stable"],
                canary=numbers["canary"], reasons=list(decision.reasons),
                figures=decision.figures, policy=alias.canary_policy,
            )  # fmt: skip
            log.info("canary %s@%s v%s: %s (%s)", adapter_name, alias.name, numbers["canary"],
                     decision.verdict, "; ".join(decision.reasons))  # fmt: skip
        return Applied(alias.name, decision, won)


async def _apply(
    session: AsyncSession, alias: AdapterAlias, decision: Decision, stored: dict[str, Any]
) -> bool:
    """Write the decision unless another process changed the canary since it was read;
    True when this UPDATE matched the row (the decision is this process's to announce)."""
    values: dict[str, Any] = {"canary_decision": stored}
    if decision.verdict is Verdict.PROMOTE:
        values.update(previous_version_id=alias.version_id, version_id=alias.canary_version_id)
    if decision.verdict is not Verdict.WAIT:
        values.update(canary_version_id=None, canary_weight=0, canary_started_at=None)
        values["updated_at"] = datetime.now(UTC)
    result = await session.execute(
        update(AdapterAlias)
        .where(
            AdapterAlias.id == alias.id,
            AdapterAlias.version_id == alias.version_id,
            AdapterAlias.canary_version_id == alias.canary_version_id,
            AdapterAlias.canary_started_at == alias.canary_started_at,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return isinstance(result, CursorResult) and result.rowcount == 1


async def _numbers(session: AsyncSession, alias: AdapterAlias) -> dict[str, Any]:
    rows = await session.execute(
        select(AdapterVersion.id, AdapterVersion.number, AdapterVersion.status).where(
            AdapterVersion.id.in_([alias.version_id, alias.canary_version_id])
        )
    )
    by_id = {row.id: row for row in rows}
    stable, canary = by_id.get(alias.version_id), by_id.get(alias.canary_version_id)
    return {
        "stable": stable.number if stable else None,
        "canary": canary.number if canary else None,
        "canary_ready": canary is not None and canary.status == VersionStatus.READY,
    }


def _stored(decision: Decision, numbers: dict[str, Any], now: float) -> dict[str, Any]:
    """The latest analysis as the alias row keeps it (and the API and console show it)."""
    return {
        "verdict": str(decision.verdict),
        "reasons": list(decision.reasons),
        "figures": decision.figures,
        "stable_version": numbers["stable"],
        "canary_version": numbers["canary"],
        "waiting_for_traffic": decision.waiting_for_traffic,
        "at": datetime.fromtimestamp(now, UTC).isoformat(),
    }
