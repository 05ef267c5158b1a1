"""The probe drill on the real SGLang CPU engine: placement serves a fine-tuned version on the
session's engine; behind the platform's back (straight to SGLang's HTTP API, docs/engines.md
§2) the engine unloads that version's name and loads another adapter's weights under it. The
periodic prober must take the engine out of rotation for the version within its interval.

The two adapters are the dev model's trained adapters of seeds 8 and 16 (the ones the gateway
tests upload, trained once per session): both are trained on the same questions with other
answers, and the version's probes are its training file's first questions, so every probe
differs between the two. The rest is the stand-in drill's (tests/support/probe_drill.py): its
rows, fine-tune and engines-page helpers, the probes' tables on the session's PostgreSQL.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.dev.corpus import adapter_examples
from loraplex.observability.metrics import PROBES_FAILING
from loraplex.serving.engines import GenerateRequest, make_driver
from loraplex.serving.live import VersionFacts
from loraplex.serving.registry import EngineHandle
from tests.support.engine import RunningEngine
from tests.support.live_cluster import Cluster, name_of
from tests.support.probe_drill import (
    Drill,
    drill_rows,
    make_fine_tuned,
    shown_failing,
    watch_placement,
)
from tests.support.trained import trained_adapter

PROBE_EVERY_S = 1.0  # a round on the CPU engine is 8 greedy generations: about a second
QUESTIONS = [question for question, _ in adapter_examples(8)]  # seed 16's are the same


def _version(cluster: Cluster, folder: Path, rank: int) -> VersionFacts:
    """An adapter folder stored as a version in the cluster's object store."""
    version_id, files = uuid.uuid4(), sorted(folder.iterdir())
    prefix = f"adapters/{version_id}/"
    shas = {f.name: cluster.store.put_file(prefix + f.name, f).sha256 for f in files}
    size = sum(f.stat().st_size for f in files)
    facts = VersionFacts(version_id, uuid.uuid4(), rank, size, prefix, shas)
    cluster.facts.versions[version_id] = facts
    return facts


async def _drill(
    tmp_path: Path, sessions: async_sessionmaker[AsyncSession], engine: RunningEngine
) -> Drill:
    """Placement over the session's SGLang engine; the served version is trained on seed 8,
    the other on seed 16 (never loaded by the platform: the drill loads its weights)."""
    cluster = Cluster(tmp_path)
    served, other = (
        _version(cluster, trained_adapter(engine.model_dir, tmp_path / f"r{r}", rank=r, seed=r), r)
        for r in (8, 16)
    )
    base_model, adapter_id = await drill_rows(sessions, [served, other])
    name = f"sglang-drill-{uuid.uuid4().hex[:6]}"
    driver = make_driver("sglang", engine.url, base_model=engine.served_model)
    handle = EngineHandle(
        name, name, engine.url, "sglang", base_model, engine.max_lora_rank,
        engine.gpu_slots, engine.host_slots, driver, healthy=True,
    )  # fmt: skip
    cluster.registry.add(handle)
    prober = watch_placement(cluster, sessions, PROBE_EVERY_S, cluster.store)
    return Drill(cluster, prober, base_model, adapter_id, [handle], served, other)


async def _ask(drill: Drill) -> str | None:
    """The served version's answer to the first question through placement; None when no
    engine serves it."""
    seat = await drill.cluster.placement.acquire(drill.base_model, drill.served.version_id)
    if seat is None:
        return None
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    request = GenerateRequest(
        rid=uuid.uuid4().hex, adapter=seat.adapter_name, messages=messages, max_tokens=16,
        temperature=0.0,
    )  # fmt: skip
    try:
        return "".join([c.text async for c in seat.engine.driver.generate(request)])
    finally:
        seat.release()


async def _swap_weights(url: str, name: str, wrong: Path) -> None:
    """Behind the platform's back: the engine unloads `name` and loads `wrong` under it."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for path, body in (
            ("/unload_lora_adapter", {"lora_name": name}),
            ("/load_lora_adapter", {"lora_name": name, "lora_path": str(wrong)}),
        ):
            reply = await http.post(path, json=body)
            assert reply.status_code == 200 and reply.json()["success"], reply.text


async def test_the_sglang_engine_serving_other_weights_leaves_rotation_for_that_version(
    tmp_path: Path, sessions: async_sessionmaker[AsyncSession], sglang_engine: RunningEngine
) -> None:
    drill = await _drill(tmp_path, sessions, sglang_engine)
    victim, placement = drill.engines[0], drill.cluster.placement
    try:
        await make_fine_tuned(drill, sessions, QUESTIONS)  # its probes: the first four questions
        await drill.prober.record(drill.served.version_id)  # placement loads it to record
        await drill.prober.drain()
        right = await _ask(drill)
        assert right, "placement does not serve the version"
        started = time.monotonic()
        await drill.prober.replay_all()  # a round before the swap: every probe passes
        round_s = time.monotonic() - started
        assert not placement.barred.get(victim.id), "the probes fail before the drill"

        await _swap_weights(sglang_engine.url, name_of(drill.served), tmp_path / "r16")
        await drill.prober.start()
        started, wrong, asked = time.monotonic(), 0, 0
        while str(drill.served.version_id) not in placement.barred.get(victim.id, ()):
            assert time.monotonic() - started < PROBE_EVERY_S + 5 * round_s, "never taken out"
            text = await _ask(drill)
            asked, wrong = asked + 1, wrong + (text != right)
        removal_s = time.monotonic() - started
        after = await _ask(drill)
        shown = await shown_failing(sessions, victim.id)
    finally:
        await drill.prober.stop()
        # As the session expects it: the drill's name no longer on the engine.
        await placement.ops.local.unload(victim, drill.served.version_id)
        await victim.driver.aclose()

    print(f"\nprobe drill (SGLang CPU) | probe interval {PROBE_EVERY_S:.1f} s | a round "
          f"{round_s:.2f} s | out of rotation {removal_s:.2f} s after the swap | wrong answers "
          f"{wrong} of {asked} requests meanwhile | after: "
          f"{'no engine serves it' if after is None else repr(after)}")  # fmt: skip
    assert wrong >= 1, "the swap did not change the version's answers"
    assert after is None  # its only engine is barred from it: no request reaches it
    assert PROBES_FAILING.labels(victim.name)._value.get() == 1
    assert shown == ["drill@v1"]  # what the engines page lists under the engine
