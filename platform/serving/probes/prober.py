"""Correctness probes: record a promoted version's greedy answers, replay them on engines.

When an alias moves to a version (placement's alias watcher sees it), the prober records
the version's greedy answers to a few prompts on the engine placement gives it, and the base
model's own answers on that engine kind if none are recorded yet. After each load of a
version on an engine, and every `every_s` (when set), it replays them there. A failed
verdict (verdict.py) takes the engine out of rotation for that version (placement's bar),
or entirely when the base model's own probes fail; a passing replay brings it back.
Everything here runs as background tasks: no request path waits for a probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from loraplex.adapters.store import ObjectStore
from loraplex.observability.metrics import PROBE_FAILURES, PROBES_FAILING
from loraplex.serving.engines import EngineError, GenerateRequest
from loraplex.serving.live import LivePlacement
from loraplex.serving.loader import engine_adapter_name, version_id_from_engine_name
from loraplex.serving.probes.prompts import (
    GENERIC_PROMPTS,
    TRAINING_HEAD_BYTES,
    prompts_from_training,
)
from loraplex.serving.probes.store import ProbeStore, ProbeSubject, Recorded, VersionOrigin
from loraplex.serving.probes.verdict import Judgement, Verdict, judge
from loraplex.serving.registry import EngineHandle

log = logging.getLogger("loraplex.serving.probes")


@dataclass(frozen=True)
class ProbeConfig:
    """How probes run."""

    every_s: float = 0.0  # periodic replay on every engine; 0: only after loads
    max_tokens: int = 32  # a few dozen greedy tokens tell one set of weights from another
    answer_timeout_s: float = 60.0


class Prober:
    """Records probes at promotion and replays them after loads and periodically."""

    def __init__(
        self,
        store: ProbeStore,
        placement: LivePlacement,
        object_store: ObjectStore | None,
        config: ProbeConfig | None = None,
    ) -> None:
        self.store, self.placement, self.object_store = store, placement, object_store
        self.config = config or ProbeConfig()
        # engine id -> subjects (version ids, or "base") its last replay failed, this process
        self.failing: dict[str, set[str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.Task[None] | None = None

    # --- hooks, called by placement ---------------------------------------------------------

    def promoted(self, version_id: UUID) -> None:
        """An alias moved to the version: record its probes in the background."""
        self._spawn(self.record(version_id))

    def loaded(self, handle: EngineHandle, version_id: UUID) -> None:
        """The version finished loading on the engine: replay its probes there."""
        self._spawn(self.replay(handle, ProbeSubject(handle.base_model, version_id)))

    # --- recording --------------------------------------------------------------------------

    async def record(self, version_id: UUID) -> None:
        """Record the version's greedy answers (and the base model's, once per engine kind)
        on an engine placement chooses, unless already recorded for that engine's kind."""
        origin = await self.store.origin(version_id)
        if origin is None:
            return
        subject = ProbeSubject(origin.base_model, version_id)
        prompts = await self._prompts(origin)
        seat = await self.placement.acquire(origin.base_model, version_id)
        if seat is None:
            log.warning("probes of %s not recorded: no engine serves it", version_id)
            return
        engine = seat.engine
        try:
            if await self.store.recorded(subject, engine.kind):
                return
            answers = [await self._answer(engine, seat.adapter_name, p) for p in prompts]
        finally:
            seat.release()
        await self._keep(subject, engine, prompts, answers)
        base = ProbeSubject(origin.base_model, None)
        if not await self.store.recorded(base, engine.kind):
            base_answers = [await self._answer(engine, None, p) for p in GENERIC_PROMPTS]
            await self._keep(base, engine, list(GENERIC_PROMPTS), base_answers)

    async def _keep(
        self,
        subject: ProbeSubject,
        engine: EngineHandle,
        prompts: list[str],
        answers: list[str | None],
    ) -> None:
        if any(answer is None for answer in answers):
            log.warning("probes of %s not recorded: %s did not answer them all",
                        subject.key, engine.name)  # fmt: skip
            return
        recorded = [Recorded(p, a) for p, a in zip(prompts, answers, strict=True) if a is not None]
        await self.store.record(subject, engine.kind, recorded, engine_config(engine))

    async def _prompts(self, origin: VersionOrigin) -> list[str]:
        if origin.training_file_key is None or self.object_store is None:
            return list(GENERIC_PROMPTS)
        try:
            head = await asyncio.to_thread(_head, self.object_store, origin.training_file_key)
        except Exception as exc:  # a missing training file leaves the generic prompts
            log.warning("training file %s unreadable for probes: %s", origin.training_file_key, exc)
            return list(GENERIC_PROMPTS)
        return prompts_from_training(head)

    # --- replaying --------------------------------------------------------------------------

    async def replay(self, handle: EngineHandle, subject: ProbeSubject) -> Judgement | None:
        """Replay the subject's probes on the engine and act on the verdict; None when
        nothing is recorded for the engine's kind."""
        recorded = await self.store.recorded(subject, handle.kind)
        if not recorded:
            return None
        name = engine_adapter_name(subject.version_id) if subject.version_id else None
        replayed = [await self._answer(handle, name, probe.prompt) for probe in recorded]
        judgement = judge([probe.answer for probe in recorded], replayed)
        self._act(handle, subject, judgement)
        await self.store.save_replay(handle.id, handle.name, subject.version_id, judgement)
        return judgement

    async def replay_all(self) -> None:
        """One periodic round: every engine's base model and every version it holds."""
        for handle in self.placement.registry.all():
            if not (handle.in_rotation or handle.probe_failed):
                continue
            await self.replay(handle, ProbeSubject(handle.base_model, None))
            for version_id in filter(None, map(version_id_from_engine_name, list(handle.loaded))):
                await self.replay(handle, ProbeSubject(handle.base_model, version_id))

    def _act(self, handle: EngineHandle, subject: ProbeSubject, judgement: Judgement) -> None:
        failing = self.failing.setdefault(handle.id, set())
        if judgement.verdict is Verdict.FAILED:
            log.error("engine %s fails the probes of %s: %d of %d answers differ",
                      handle.name, subject.key, judgement.differed, judgement.total)  # fmt: skip
            scope = "adapter" if subject.version_id else "base"
            PROBE_FAILURES.labels(handle.name, scope).inc()
            failing.add(subject.key)
            self._take_out(handle, subject)
        elif judgement.verdict is Verdict.PASSED and subject.key in failing:
            log.warning("engine %s passes the probes of %s again", handle.name, subject.key)
            failing.discard(subject.key)
            self._bring_back(handle, subject)
        PROBES_FAILING.labels(handle.name).set(len(failing))

    def _take_out(self, handle: EngineHandle, subject: ProbeSubject) -> None:
        if subject.version_id is None:
            handle.probe_failed = True  # out of rotation for every request
        else:
            self.placement.bar(handle.id, subject.version_id)

    def _bring_back(self, handle: EngineHandle, subject: ProbeSubject) -> None:
        if subject.version_id is None:
            handle.probe_failed = False
        else:
            self.placement.unbar(handle.id, subject.version_id)

    async def _answer(self, handle: EngineHandle, adapter: str | None, prompt: str) -> str | None:
        """The engine's greedy answer to `prompt`; None when it failed to give one."""
        request = GenerateRequest(
            rid=f"probe-{uuid.uuid4().hex}",
            adapter=adapter,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=self.config.max_tokens,
            temperature=0.0,
            seed=0,
        )
        try:
            async with asyncio.timeout(self.config.answer_timeout_s):
                return "".join([chunk.text async for chunk in handle.driver.generate(request)])
        except (EngineError, TimeoutError) as exc:
            log.warning("probe on %s got no answer: %s", handle.name, exc)
            return None

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Run the periodic replay, when `every_s` is set."""
        if self.config.every_s > 0 and self._loop is None:
            self._loop = asyncio.create_task(self._run(), name="probes")

    async def stop(self) -> None:
        """Stop the loop and every probe in progress."""
        tasks = [*self._tasks, *([self._loop] if self._loop else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._loop = None

    async def drain(self) -> None:
        """Wait for the probes in progress (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.every_s)
            try:
                await self.replay_all()
            except Exception:  # the loop must outlive one bad round
                log.exception("probe round failed")

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(_logged(work))
        self._tasks.add(task)  # a reference, or the task may be collected mid-flight
        task.add_done_callback(self._tasks.discard)


def engine_config(engine: EngineHandle) -> dict[str, Any]:
    """What a recording notes about the engine that produced it."""
    return {
        "engine": engine.name,
        "kind": engine.kind,
        "max_lora_rank": engine.max_lora_rank,
        "gpu_slots": engine.gpu_slots,
        "host_slots": engine.host_slots,
    }


async def _logged(work: Coroutine[Any, Any, Any]) -> None:
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("probe failed")


def _head(store: ObjectStore, key: str) -> bytes:
    """The first TRAINING_HEAD_BYTES of an object."""
    head = bytearray()
    for chunk in store.open_chunks(key):
        head += chunk
        if len(head) >= TRAINING_HEAD_BYTES:
            break
    return bytes(head[:TRAINING_HEAD_BYTES])
