"""An in-memory engine driver speaking the `EngineDriver` protocol, for registry and loader tests."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

from loraplex.serving.engines import (
    AdapterNotLoaded,
    EngineHealth,
    EngineLoad,
    EngineUnavailable,
    GenerateChunk,
    GenerateRequest,
)
from loraplex.serving.engines.reported_facts import EngineSilent, ReportedFacts
from loraplex.serving.registry import EngineHandle


class FakeDriver:
    """An engine that is up or down at the test's word and remembers what it was asked."""

    def __init__(self, kind: str = "vllm", url: str = "http://fake-engine") -> None:
        self.kind = kind
        self.url = url
        self.base_takes_a_slot = kind == "sglang"  # as the real drivers say
        self.continues_by_token_ids = False  # it returns no token ids
        self.up = True
        self.hang = False  # health() never answers
        self.adapters: dict[str, Path] = {}
        self.loads: list[str] = []
        self.files_seen_at_load: dict[str, list[str]] = {}
        self.load_gate: asyncio.Event | None = None  # set by a test to hold loads
        self.list_gate: asyncio.Event | None = None  # set by a test to hold list_loaded
        self.list_started = asyncio.Event()
        self.closed = False
        # Answer from the weights (the loaded folder's bytes) and the prompt, as a real
        # engine's greedy output depends on them, instead of echoing the adapter's name.
        self.answers_by_weights = False
        self.base_weights = b"base"  # what the base model's answers derive from
        # What the engine says it was started with (registration checks claims against it).
        self.reported = ReportedFacts(kind=kind)

    def restart(self) -> None:
        """The engine process came back empty, as a restarted engine does."""
        self.adapters.clear()

    async def health(self) -> EngineHealth:
        """Healthy while `up`; hangs forever when `hang`."""
        if self.hang:
            await asyncio.Event().wait()
        return EngineHealth(self.up, 0.0, "" if self.up else "connection refused")

    async def reported_facts(self) -> ReportedFacts:
        """`reported`, while up."""
        if not self.up:
            raise EngineSilent("connection refused")
        return self.reported

    async def list_loaded(self) -> set[str]:
        """The adapters held now."""
        self._check_up()
        self.list_started.set()
        if self.list_gate is not None:
            snapshot = set(self.adapters)
            await self.list_gate.wait()
            return snapshot
        return set(self.adapters)

    async def load(self, name: str, path: Path, pinned: bool = False) -> None:
        """Remember the adapter (and which files were on disk when asked)."""
        self._check_up()
        self.files_seen_at_load[name] = sorted(p.name for p in path.iterdir())
        if self.load_gate is not None:
            await self.load_gate.wait()
        self.loads.append(name)
        self.adapters[name] = path

    async def unload(self, name: str) -> None:
        """Forget the adapter."""
        self._check_up()
        self.adapters.pop(name, None)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """One chunk: the adapter name echoed, or the answer its weights give."""
        self._check_up()
        yield GenerateChunk(text=self._answer(request), finish_reason="stop")

    def _answer(self, request: GenerateRequest) -> str:
        if not self.answers_by_weights:
            return request.adapter or "base"
        weights = self.base_weights
        if request.adapter is not None:
            path = self.adapters.get(request.adapter)
            if path is None:
                raise AdapterNotLoaded(f"adapter {request.adapter} is not loaded")
            weights += b"".join(f.read_bytes() for f in sorted(path.iterdir()) if f.is_file())
        prompt = json.dumps(request.messages if request.is_chat else request.prompt)
        return hashlib.sha256(weights + prompt.encode()).hexdigest()[:24]

    async def abort(self, rid: str) -> None:
        """Nothing to stop."""

    async def metrics(self) -> dict[str, float]:
        """No samples."""
        return {}

    async def queue_depth(self) -> EngineLoad:
        """Nothing running: the fake engine generates instantly."""
        return EngineLoad(running=0.0, waiting=0.0)

    async def aclose(self) -> None:
        """Note the close."""
        self.closed = True

    def _check_up(self) -> None:
        if not self.up:
            raise EngineUnavailable("connection refused")


def fake_engine(gpu_slots: int = 4, host_slots: int = 8, in_flight: int = 0) -> EngineHandle:
    """A healthy vLLM engine "e" serving base model "tiny" on a `FakeDriver`."""
    return EngineHandle(
        id="e",
        name="e",
        url="u",
        kind="vllm",
        base_model="tiny",
        max_lora_rank=64,
        gpu_slots=gpu_slots,
        host_slots=host_slots,
        driver=FakeDriver(),
        healthy=True,
        in_flight=in_flight,
    )
