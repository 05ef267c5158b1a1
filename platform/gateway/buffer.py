"""The bounded buffer between an engine stream and a client.

The engine side appends pieces as they arrive; the client side takes *everything* pending
each time it is ready to write. A client that reads as fast as the engine writes gets one
event per engine chunk; a slower one gets fewer, larger events (coalescing). Pending bytes
above `max_bytes` mean the client is not keeping up at all: the buffer fails with
`slow_client` and the producer aborts the engine request.

A reply has `choices` choices (OpenAI's `n`); each piece belongs to one of them, and each
ends with its own finish reason. Pieces carry text, and for richer requests tool-call
deltas and logprobs, which coalesce too: text joins, tool-call arguments join per call, and
logprob lists concatenate.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from loraplex.gateway.wait_timer import WaitTimer

ToolCallDelta = dict[str, Any]
Logprobs = dict[str, Any]


@dataclass(slots=True)
class ChoicePart:
    """What one choice received since the last take (or, taken at the end, all of it)."""

    index: int
    text: str = ""
    tool_calls: list[ToolCallDelta] | None = None  # one entry per call, arguments joined
    logprobs: Logprobs | None = None
    finish_reason: str | None = None  # set in the take that ends this choice

    @property
    def plain(self) -> bool:
        """Only text (or nothing), on choice 0: the common case, encoded fastest."""
        return self.index == 0 and self.tool_calls is None and self.logprobs is None


@dataclass(slots=True)
class Taken:
    """What the client side takes in one go."""

    parts: list[ChoicePart] = field(default_factory=list)  # by choice index
    pieces: int = 0  # how many engine chunks were coalesced into `parts`
    finish_reason: str | None = None  # the whole reply ended (every choice finished)
    error: tuple[str, str] | None = None  # (code, message)

    @property
    def text(self) -> str:
        """The text of every part, joined (the reply's text when there is one choice)."""
        return "".join(part.text for part in self.parts)


@dataclass
class StreamBuffer:
    """Pending pieces, the end state, and an event waking the client side."""

    max_bytes: int
    choices: int = 1
    # (choice index, text, tool-call deltas, logprobs) in arrival order
    _pending: list[tuple[int, str, list[ToolCallDelta] | None, Logprobs | None]] = field(
        default_factory=list
    )
    _pending_bytes: int = 0
    _finished: dict[int, str] = field(default_factory=dict)  # every choice that ended
    _finishes_new: dict[int, str] = field(default_factory=dict)  # ... not yet taken
    finish_reason: str | None = None
    error: tuple[str, str] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token_at: float | None = None  # the engine's first text reached the buffer
    first_relayed_at: float | None = None  # the first text event went to the client
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    # The heartbeat (`wait`): its interval, when the wait in progress began, its timer, and
    # whether it fired.
    _heartbeat_s: float = 0.0
    _waiting_since: float | None = None
    _heartbeat: WaitTimer | None = None
    _beat: bool = False

    @property
    def closed(self) -> bool:
        """True once the stream finished or failed."""
        return self.finish_reason is not None or self.error is not None

    @property
    def choices_done(self) -> bool:
        """Every choice has its finish reason (the engine may still send the usage)."""
        return len(self._finished) >= self.choices

    def push(
        self,
        text: str,
        *,
        index: int = 0,
        tool_calls: list[ToolCallDelta] | None = None,
        logprobs: Logprobs | None = None,
    ) -> bool:
        """Append an engine piece; False when the client has fallen too far behind."""
        if text or tool_calls or logprobs:
            self._pending.append((index, text, tool_calls, logprobs))
            self._pending_bytes += len(text) + (_size(tool_calls) if tool_calls else 0)
            self._wake.set()
        return self._pending_bytes <= self.max_bytes

    def finish_choice(self, index: int, reason: str) -> bool:
        """Choice `index` ended; True when that was the last one still running."""
        if index not in self._finished:
            self._finished[index] = self._finishes_new[index] = reason
            self._wake.set()
        return self.choices_done

    def finish(self, reason: str | None = None) -> None:
        """The engine ended the generation: every choice still open ends with `reason`."""
        if self.closed:
            return
        for index in range(self.choices):
            if index not in self._finished:
                self.finish_choice(index, reason or "stop")
        self.finish_reason = self._finished.get(0, reason or "stop")
        self._wake.set()

    def fail(self, code: str, message: str) -> None:
        """End the stream with an error event (the first failure wins)."""
        if not self.closed:
            self.error = (code, message)
            self._wake.set()

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait for something to take; False after `timeout_s` of waiting with nothing
        arriving (time for a heartbeat).

        One timer per stream rather than one per wait (a wait per write, a write per token
        for a fast reader): a `WaitTimer`.
        """
        if self._pending or self._finishes_new or self.closed:
            return True
        if timeout_s is None:
            await self._wake.wait()
            return True
        if self._heartbeat is None:
            self._heartbeat = WaitTimer(self._wait_ends, self._beat_now, time.monotonic)
        self._heartbeat_s = timeout_s
        self._waiting_since = time.monotonic()
        self._heartbeat.arm()
        try:
            await self._wake.wait()
        finally:
            self._waiting_since = None
        if self._beat:
            self._beat = False
            if not (self._pending or self._finishes_new or self.closed):
                self._wake.clear()
                return False
        return True

    def _wait_ends(self) -> float | None:
        """When the wait in progress is due its heartbeat (None: no wait in progress)."""
        if self._waiting_since is None:
            return None
        return self._waiting_since + self._heartbeat_s

    def _beat_now(self) -> None:
        self._beat = True
        self._wake.set()

    def take(self) -> Taken:
        """Everything pending, coalesced per choice, plus the end state once drained."""
        taken = Taken(parts=_coalesce(self._pending), pieces=len(self._pending))
        if self._finishes_new:
            _add_finishes(taken.parts, self._finishes_new)
            self._finishes_new = {}
        self._pending = []
        self._pending_bytes = 0
        self._wake.clear()
        taken.finish_reason, taken.error = self.finish_reason, self.error
        return taken


def _coalesce(
    pending: list[tuple[int, str, list[ToolCallDelta] | None, Logprobs | None]],
) -> list[ChoicePart]:
    if not pending:
        return []
    if all(index == 0 and calls is None and lp is None for index, _, calls, lp in pending):
        return [ChoicePart(0, "".join(text for _, text, _, _ in pending))]  # the fast path
    parts: dict[int, ChoicePart] = {}
    texts: dict[int, list[str]] = {}
    for index, text, calls, logprobs in pending:
        part = parts.get(index)
        if part is None:
            part = parts[index] = ChoicePart(index)
            texts[index] = []
        texts[index].append(text)
        if calls:
            part.tool_calls = merge_tool_calls(part.tool_calls or [], calls)
        if logprobs:
            part.logprobs = merge_logprobs(part.logprobs, logprobs)
    for index, part in parts.items():
        part.text = "".join(texts[index])
    return [parts[index] for index in sorted(parts)]


def _add_finishes(parts: list[ChoicePart], finishes: dict[int, str]) -> None:
    by_index = {part.index: part for part in parts}
    for index, reason in finishes.items():
        if index not in by_index:
            by_index[index] = ChoicePart(index)
            parts.append(by_index[index])
        by_index[index].finish_reason = reason
    parts.sort(key=lambda part: part.index)


def merge_tool_calls(
    calls: list[ToolCallDelta], deltas: list[ToolCallDelta]
) -> list[ToolCallDelta]:
    """`calls` with `deltas` applied: one entry per call `index`, its arguments joined.

    The first delta of a call names it (`id`, `type`, `function.name`); later ones add to
    `function.arguments`. Entries are copies: the engine's dicts are never changed.
    """
    merged = {call.get("index", i): call for i, call in enumerate(calls)}
    for position, delta in enumerate(deltas):
        index = delta.get("index", position)
        function = delta.get("function") or {}
        call = merged.get(index)
        if call is None:  # engines may send nulls for what a later delta leaves out
            merged[index] = {
                **{k: v for k, v in delta.items() if v is not None},
                "index": index,
                "function": {
                    **{k: v for k, v in function.items() if v is not None},
                    "arguments": function.get("arguments") or "",
                },
            }
            continue
        for key in ("id", "type"):
            if delta.get(key) and not call.get(key):
                call[key] = delta[key]
        joined = call["function"]
        if function.get("name") and not joined.get("name"):
            joined["name"] = function["name"]
        joined["arguments"] = (joined.get("arguments") or "") + (function.get("arguments") or "")
    return [merged[index] for index in sorted(merged)]


def merge_logprobs(into: Logprobs | None, more: Logprobs) -> Logprobs:
    """Two logprobs objects of consecutive tokens as one: every list concatenates."""
    if into is None:
        return {
            key: list(value) if isinstance(value, list) else value for key, value in more.items()
        }
    for key, value in more.items():
        if isinstance(value, list):
            into[key] = (into.get(key) or []) + value
        elif into.get(key) is None:
            into[key] = value
    return into


def _size(calls: list[ToolCallDelta]) -> int:
    return sum(len((call.get("function") or {}).get("arguments") or "") + 16 for call in calls)
