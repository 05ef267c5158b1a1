"""A continuous-batching engine for the simulator, timed by an `EngineProfile`.

The engine holds a queue of requests it was sent and a running batch. Each step:
1. it moves queued requests into the batch, in arrival order, while the batch has room for
   another sequence (`max_running`) and the KV cache for its prompt and output
   (`kv_tokens`); a request whose adapter would put more distinct adapters in the batch
   than the engine has slots is skipped and stays queued, while those behind it may go
   (SGLang and vLLM both do this, docs/engines.md §4.5 and §8; SGLang counts the base
   model as a slot, vLLM does not);
2. it runs one step: prompts are prefilled up to `prefill_chunk_tokens` per step (chunked
   prefill), the sequences done with their prompt decode one token each. SGLang by default
   runs a step of new prefills on its own and pauses decoding for it; vLLM mixes both in
   one step (`mixed_steps`);
3. at the step's end a prompt finished this step gives the request its first token, a
   decode step its next one; a request with all its tokens leaves and frees its KV.

Time comes in from the caller; the engine says when its current step ends.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from loraplex.serving.simulator.engine_profile import BatchShape, EngineProfile

BASE = ""  # the adapter name of a base-model request


@dataclass(slots=True)
class EngineRequest:
    """One request inside the engine, with its progress."""

    rid: int
    prompt_tokens: int
    output_tokens: int
    adapter: str = BASE
    rank: int = 0
    prefill_left: int = field(init=False)
    tokens_out: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.prefill_left = max(1, self.prompt_tokens)

    @property
    def kv_tokens(self) -> int:
        """KV cache it holds at most: its prompt and its whole output."""
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A request's first token (`first`) or its last (`finished`) at `at`."""

    rid: int
    at: float
    first: bool
    finished: bool


class EngineModel:
    """One engine: its queue, its running batch and its current step."""

    def __init__(self, profile: EngineProfile, *, mixed_steps: bool | None = None) -> None:
        self.profile = profile
        self.mixed_steps = profile.kind == "vllm" if mixed_steps is None else mixed_steps
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.step_ends_at = math.inf  # no step running
        self._kv_used = 0
        self._step: list[tuple[EngineRequest, int]] = []  # (request, prompt tokens this step)
        self.steps = 0
        self._step_seconds: dict[tuple[int, ...], float] = {}

    @property
    def busy(self) -> bool:
        """Whether a step is running."""
        return self.step_ends_at < math.inf

    def submit(self, request: EngineRequest, now: float) -> None:
        """A request arrives; an idle engine wakes at once, and forms its batch from every
        request sent at that same instant (`end_step` at `now`)."""
        self.waiting.append(request)
        if not self.busy:
            self.step_ends_at = now  # an empty step: the wake-up

    def end_step(self) -> list[TokenEvent]:
        """Finish the current step at `step_ends_at`; start the next if there is work."""
        now = self.step_ends_at
        events = []
        for request, prefilled in self._step:
            event = self._advance(request, prefilled, now)
            if event is not None:
                events.append(event)
        self.running = [r for r in self.running if r.tokens_out < r.output_tokens]
        self.step_ends_at = math.inf
        self._step = []
        if self.running or self.waiting:
            self._start_step(now)
        return events

    def _advance(self, request: EngineRequest, prefilled: int, now: float) -> TokenEvent | None:
        if prefilled:
            request.prefill_left -= prefilled
            if request.prefill_left > 0:
                return None  # more of its prompt next step
        request.tokens_out += 1
        finished = request.tokens_out >= request.output_tokens
        if finished:
            self._kv_used -= request.kv_tokens
        if request.tokens_out == 1 or finished:
            return TokenEvent(request.rid, now, request.tokens_out == 1, finished)
        return None

    def _start_step(self, now: float) -> None:
        if self.waiting:
            self._admit_waiting()
        budget = self.profile.prefill_chunk_tokens
        step: list[tuple[EngineRequest, int]] = []
        prefill_tokens = 0
        for request in self.running:
            if request.prefill_left > 0 and budget > 0:
                take = min(request.prefill_left, budget)
                budget -= take
                prefill_tokens += take
                step.append((request, take))
        prefill_seqs = len(step)
        if not step or self.mixed_steps:
            step.extend((r, 0) for r in self.running if r.prefill_left <= 0)
        if not step:
            return
        self._step = step
        self.steps += 1
        adapters = {(r.adapter, r.rank) for r, _ in step if r.adapter != BASE}
        shape = (
            len(step) - prefill_seqs,
            prefill_tokens,
            prefill_seqs,
            len(adapters),
            sum(rank for _, rank in adapters),
        )
        seconds = self._step_seconds.get(shape)
        if seconds is None:  # the same few shapes recur: each is costed once
            seconds = self._step_seconds[shape] = self.profile.step.seconds(BatchShape(*shape))
        self.step_ends_at = now + seconds

    def _admit_waiting(self) -> None:
        profile = self.profile
        in_batch = {r.adapter for r in self.running}
        skipped: deque[EngineRequest] = deque()
        while self.waiting:
            request = self.waiting.popleft()
            if len(self.running) >= profile.max_running:
                skipped.append(request)
                break
            if self._kv_used + request.kv_tokens > profile.kv_tokens and self.running:
                skipped.append(request)
                break
            if not self._fits_a_slot(in_batch, request.adapter):
                skipped.append(request)  # stays queued; those behind it may go
                continue
            in_batch.add(request.adapter)
            self.running.append(request)
            self._kv_used += request.kv_tokens
        skipped.extend(self.waiting)
        self.waiting = skipped

    def _fits_a_slot(self, in_batch: set[str], adapter: str) -> bool:
        if adapter in in_batch or (adapter == BASE and not self.profile.base_takes_a_slot):
            return True
        counted = {a for a in in_batch if a != BASE or self.profile.base_takes_a_slot}
        return len(counted) + 1 <= self.profile.adapter_slots
