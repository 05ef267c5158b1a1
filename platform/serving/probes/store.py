"""The probes' database side: recorded answers, the last replay per engine and subject, and
where a version's probe prompts come from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.db.models import Adapter, AdapterVersion, DatasetFile, FineTuneJob
from loraplex.db.models.probes import BASE_SUBJECT, ProbeAnswer, ProbeReplay
from loraplex.serving.probes.verdict import Judgement, Verdict

SessionFactory = Callable[[], Any]


@dataclass(frozen=True, slots=True)
class ProbeSubject:
    """What to probe: a version (or the base model, `version_id` None) of a base model."""

    base_model: str
    version_id: UUID | None

    @property
    def key(self) -> str:
        """The subject as a key part: the version id, or "base"."""
        return str(self.version_id) if self.version_id else BASE_SUBJECT


@dataclass(frozen=True, slots=True)
class Recorded:
    """One recorded probe: the prompt and its greedy answer."""

    prompt: str
    answer: str


@dataclass(frozen=True, slots=True)
class VersionOrigin:
    """A version's base model and, for a fine-tune's output, its training file's object key."""

    base_model: str
    training_file_key: str | None


class ProbeStore:
    """Reads and writes `probe_answers` and `probe_replays`."""

    def __init__(self, sessions: SessionFactory) -> None:
        self._sessions = sessions

    async def origin(self, version_id: UUID) -> VersionOrigin | None:
        """The version's base model and training file (when a fine-tune made it)."""
        async with self._sessions() as session:
            version = await session.get(AdapterVersion, version_id)
            if version is None:
                return None
            adapter = await session.get_one(Adapter, version.adapter_id)
            key = None
            if version.job_id is not None:
                key = await session.scalar(
                    select(DatasetFile.storage_key)
                    .join(FineTuneJob, FineTuneJob.training_file_id == DatasetFile.id)
                    .where(FineTuneJob.id == version.job_id)
                )
            return VersionOrigin(adapter.base_model.name, key or None)

    async def recorded(self, subject: ProbeSubject, engine_kind: str) -> list[Recorded]:
        """The subject's recorded probes on `engine_kind`, in order (empty: none)."""
        query = (
            select(ProbeAnswer.prompt, ProbeAnswer.answer)
            .where(
                ProbeAnswer.base_model == subject.base_model,
                ProbeAnswer.engine_kind == engine_kind,
                ProbeAnswer.version_id.is_(None)
                if subject.version_id is None
                else ProbeAnswer.version_id == subject.version_id,
            )
            .order_by(ProbeAnswer.position)
        )
        async with self._sessions() as session:
            return [Recorded(p, a) for p, a in (await session.execute(query)).all()]

    async def record(
        self,
        subject: ProbeSubject,
        engine_kind: str,
        answers: Sequence[Recorded],
        engine_config: dict[str, Any],
    ) -> bool:
        """Store a recording; False when another replica's recording is already there."""
        rows = [
            ProbeAnswer(
                key=f"{subject.base_model}|{subject.key}|{engine_kind}|{position}",
                base_model=subject.base_model,
                version_id=subject.version_id,
                engine_kind=engine_kind,
                position=position,
                prompt=probe.prompt,
                answer=probe.answer,
                engine_config=engine_config,
            )
            for position, probe in enumerate(answers)
        ]
        async with self._sessions() as session:
            session.add_all(rows)
            try:
                await session.commit()
            except IntegrityError:
                return False
        return True

    async def save_replay(
        self, engine_id: str, engine_name: str, version_id: UUID | None, judgement: Judgement
    ) -> None:
        """Keep the last replay's verdict of the subject on the engine."""
        key = f"{engine_id}|{version_id or BASE_SUBJECT}"
        async with self._sessions() as session:
            row = await session.scalar(select(ProbeReplay).where(ProbeReplay.key == key))
            if row is None:
                row = ProbeReplay(key=key, engine_id=engine_id, version_id=version_id)
                session.add(row)
            row.engine_name = engine_name
            row.verdict = judgement.verdict.value
            row.matched, row.differed = judgement.matched, judgement.differed
            row.unanswered = judgement.unanswered
            try:
                await session.commit()
            except IntegrityError:  # another replica inserted it first: its verdict stands
                return


@dataclass(frozen=True, slots=True)
class FailingProbe:
    """An engine whose last replay of a subject failed, as the engines page shows it."""

    engine_id: str
    subject: str  # "adapter@vN", or "base model"
    differed: int
    total: int


async def failing_probes(session: AsyncSession) -> dict[str, list[FailingProbe]]:
    """Engine id -> the subjects its last replay failed, from every replica's replays."""
    query = (
        select(ProbeReplay, Adapter.name, AdapterVersion.number)
        .outerjoin(AdapterVersion, AdapterVersion.id == ProbeReplay.version_id)
        .outerjoin(Adapter, Adapter.id == AdapterVersion.adapter_id)
        .where(ProbeReplay.verdict == Verdict.FAILED.value)
        .order_by(ProbeReplay.engine_id, ProbeReplay.updated_at)
    )
    failing: dict[str, list[FailingProbe]] = {}
    for replay, adapter, number in (await session.execute(query)).all():
        subject = "base model" if replay.version_id is None else f"{adapter}@v{number}"
        total = replay.matched + replay.differed + replay.unanswered
        failing.setdefault(replay.engine_id, []).append(
            FailingProbe(replay.engine_id, subject, replay.differed, total)
        )
    return failing
