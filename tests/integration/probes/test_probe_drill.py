"""The probe drill: an engine made to serve another adapter's weights under a served
version's name (behind the platform's back) is out of rotation for that version within the
probe interval, and requests for it keep getting the right answers from the other engine.

Live placement over two in-process engines (FakeDriver, answering from the weights it
loaded), the probes' tables on the session's PostgreSQL.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.control.adapters.aliases import AliasService
from loraplex.db.models import (
    Adapter,
)
from loraplex.observability.metrics import PROBES_FAILING
from loraplex.serving.engines import GenerateRequest
from loraplex.serving.live import AliasWatcher, LiveConfig, VersionFacts
from loraplex.serving.probes import ProbeStore, ProbeSubject, Verdict
from loraplex.serving.registry import EngineHandle
from tests.support.fake_driver import FakeDriver
from tests.support.live_cluster import Cluster, name_of
from tests.support.probe_drill import (
    Drill,
    drill_rows,
    make_fine_tuned,
    shown_failing,
    watch_placement,
)

PROBE_EVERY_S = 0.2
PROMPT = [{"role": "user", "content": "What does the drill ask?"}]


def _engine(cluster: Cluster, name: str, base_model: str) -> EngineHandle:
    driver = FakeDriver(kind="vllm", url=f"http://{name}")
    driver.answers_by_weights = True
    handle = EngineHandle(
        name, name, driver.url, "vllm", base_model, 64, 1, 2, driver, healthy=True
    )  # fmt: skip
    cluster.registry.add(handle)
    return handle


async def _drill(tmp_path: Path, sessions: async_sessionmaker[AsyncSession]) -> Drill:
    cluster = Cluster(tmp_path, LiveConfig(reconcile_every_s=PROBE_EVERY_S / 4))
    served, other = cluster.version(), cluster.version()
    base_model, adapter_id = await drill_rows(sessions, [served, other])
    engines = [_engine(cluster, name, base_model) for name in ("e1", "e2")]
    prober = watch_placement(cluster, sessions, PROBE_EVERY_S)
    return Drill(cluster, prober, base_model, adapter_id, engines, served, other)


async def _ask(drill: Drill, facts: VersionFacts) -> tuple[str, str]:
    """One request for the version through placement: (engine name, answer)."""
    seat = await drill.cluster.placement.acquire(drill.base_model, facts.version_id)
    assert seat is not None
    try:
        request = GenerateRequest(rid=uuid.uuid4().hex, adapter=seat.adapter_name, messages=PROMPT)
        text = "".join([c.text async for c in seat.engine.driver.generate(request)])
    finally:
        seat.release()
    return seat.engine.name, text


async def _load_everywhere(drill: Drill, facts: VersionFacts) -> None:
    """The version loaded on both engines (as a hot adapter's replicas are)."""
    placement = drill.cluster.placement
    for handle in drill.engines:
        await placement.ops.local.load(handle, facts)
        placement.reconcile(placement.pool(drill.base_model), handle.id)
    await drill.prober.drain()


def _swap_weights(victim: EngineHandle, served: VersionFacts, other: Path, tmp: Path) -> None:
    """Behind the platform's back: the engine now holds `other`'s weights under `served`'s name."""
    driver: FakeDriver = victim.driver  # type: ignore[assignment]
    wrong = tmp / "wrong-weights"
    shutil.copytree(other, wrong)
    driver.adapters[name_of(served)] = wrong


async def test_an_engine_serving_other_weights_leaves_rotation_for_that_version(
    tmp_path: Path, sessions: async_sessionmaker[AsyncSession]
) -> None:
    drill = await _drill(tmp_path, sessions)
    drill.prober.promoted(drill.served.version_id)  # an alias moved to it: recorded off-path
    await drill.prober.drain()
    await _load_everywhere(drill, drill.served)
    await _load_everywhere(drill, drill.other)
    answers = {await _ask(drill, drill.served) for _ in range(4)}
    right = {text for _, text in answers}
    assert len(right) == 1, f"both engines should give one answer before the drill: {answers}"
    victim_name, _ = await _ask(drill, drill.served)
    victim = next(e for e in drill.engines if e.name == victim_name)
    other_path = victim.driver.adapters[name_of(drill.other)]  # type: ignore[attr-defined]
    _swap_weights(victim, drill.served, other_path, tmp_path)

    await drill.prober.start()
    started, wrong, asked = time.monotonic(), 0, 0
    try:
        while str(drill.served.version_id) not in drill.cluster.placement.barred.get(victim.id, ()):
            assert time.monotonic() - started < 20 * PROBE_EVERY_S, "never taken out of rotation"
            _engine, text = await _ask(drill, drill.served)
            asked, wrong = asked + 1, wrong + (text not in right)
            await asyncio.sleep(PROBE_EVERY_S / 20)
        removal_s = time.monotonic() - started
        after = [await _ask(drill, drill.served) for _ in range(20)]
        shown = await shown_failing(sessions, victim.id)
    finally:
        await drill.prober.stop()

    print(f"\nprobe drill: out of rotation {removal_s:.2f} s after the swap (probe interval "
          f"{PROBE_EVERY_S} s); {wrong} of {asked} requests in that time got the other "
          f"adapter's answer; after it {sum(t in right for _, t in after)} of {len(after)} "
          f"right, all on {sorted({e for e, _ in after})}")  # fmt: skip
    assert all(text in right and engine != victim.name for engine, text in after)
    assert PROBES_FAILING.labels(victim.name)._value.get() == 1
    assert shown == ["drill@v1"]  # what the engines page lists under the engine


async def test_the_other_versions_on_that_engine_stay_in_rotation(
    tmp_path: Path, sessions: async_sessionmaker[AsyncSession]
) -> None:
    drill = await _drill(tmp_path, sessions)
    for facts in (drill.served, drill.other):
        await drill.prober.record(facts.version_id)
    await _load_everywhere(drill, drill.served)
    await _load_everywhere(drill, drill.other)
    victim = drill.engines[0]
    other_path = victim.driver.adapters[name_of(drill.other)]  # type: ignore[attr-defined]
    _swap_weights(victim, drill.served, other_path, tmp_path)
    subject = ProbeSubject(drill.base_model, drill.other.version_id)
    judged = await drill.prober.replay(victim, subject)
    assert judged is not None and judged.verdict is Verdict.PASSED
    assert drill.cluster.placement.barred.get(victim.id, set()) == set()


async def test_an_engine_whose_base_model_answers_differ_leaves_rotation_entirely(
    tmp_path: Path, sessions: async_sessionmaker[AsyncSession]
) -> None:
    drill = await _drill(tmp_path, sessions)
    await drill.prober.record(drill.served.version_id)  # records the base model's too
    victim = drill.engines[1]
    victim.driver.base_weights = b"another base"  # type: ignore[attr-defined]
    await drill.prober.replay_all()
    assert [e.name for e in drill.cluster.registry.candidates(drill.base_model)] == ["e1"]


async def _point(sessions: async_sessionmaker[AsyncSession], drill: Drill, number: int) -> None:
    """Point the adapter's alias "prod" at version `number`, as the API does."""
    async with sessions() as session:
        adapter = await session.get_one(Adapter, drill.adapter_id)
        await AliasService(session=session).point(adapter, "prod", number, "test")
        await session.commit()


async def test_moving_an_alias_records_the_version_probes_in_the_background(
    tmp_path: Path, sessions: async_sessionmaker[AsyncSession]
) -> None:
    drill = await _drill(tmp_path, sessions)
    placement = drill.cluster.placement
    placement.hints = AliasWatcher(sessions)
    await _point(sessions, drill, 2)  # the alias starts on the other version
    await placement.hints.moves()  # the watcher's first look only learns the current state
    store, subject = ProbeStore(sessions), ProbeSubject(drill.base_model, drill.served.version_id)
    await placement.start()
    try:
        await _point(sessions, drill, 1)  # the API's promotion: placement's loop sees it
        for _ in range(100):
            recorded = await store.recorded(subject, "vllm")
            if recorded:
                break
            await asyncio.sleep(PROBE_EVERY_S / 4)
    finally:
        await placement.stop()
        await drill.prober.stop()
    assert len(recorded) == 4 and len({probe.answer for probe in recorded}) == 4


async def test_a_fine_tunes_probes_are_the_first_prompts_of_its_training_file(
    tmp_path: Path, sessions: async_sessionmaker[AsyncSession]
) -> None:
    drill = await _drill(tmp_path, sessions)
    await make_fine_tuned(drill, sessions, ["q1", "q2", "q1", "q3", "q4", "q5"])
    drill.prober.object_store = drill.cluster.store

    await drill.prober.record(drill.served.version_id)

    subject = ProbeSubject(drill.base_model, drill.served.version_id)
    recorded = await ProbeStore(sessions).recorded(subject, "vllm")
    assert [probe.prompt for probe in recorded] == ["q1", "q2", "q3", "q4"]
