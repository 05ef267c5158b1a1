"""The bounded buffer between an engine stream and a client.

The engine side appends text as it arrives; the client side takes *everything* pending each
time it is ready to write. A client that reads as fast as the engine writes gets one event
per engine chunk; a slower one gets fewer, larger events (coalescing). Pending text above
`max_bytes` means the client is not keeping up at all: the buffer fails with `slow_client`
and the producer aborts the engine request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(slots=True)
class Taken:
    """What the client side takes in one go."""

    text: str = ""
    pieces: int = 0  # how many engine chunks were coalesced into `text`
    finish_reason: str | None = None
    error: tuple[str, str] | None = None  # (code, message)


@dataclass
class StreamBuffer:
    """Pending text, the end state, and an event waking the client side."""

    max_bytes: int
    _pending: list[str] = field(default_factory=list)
    _pending_bytes: int = 0
    finish_reason: str | None = None
    error: tuple[str, str] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token_at: float | None = None  # the engine's first text reached the buffer
    first_relayed_at: float | None = None  # the first text event went to the client
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def closed(self) -> bool:
        """True once the stream finished or failed."""
        return self.finish_reason is not None or self.error is not None

    def push(self, text: str) -> bool:
        """Append engine text; False when the client has fallen too far behind."""
        if text:
            self._pending.append(text)
            self._pending_bytes += len(text)
            self._wake.set()
        return self._pending_bytes <= self.max_bytes

    def finish(self, reason: str) -> None:
        """The engine ended the generation."""
        if not self.closed:
            self.finish_reason = reason
            self._wake.set()

    def fail(self, code: str, message: str) -> None:
        """End the stream with an error event (the first failure wins)."""
        if not self.closed:
            self.error = (code, message)
            self._wake.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait for something to take; False on timeout (time for a heartbeat)."""
        if self._pending or self.closed:
            return True
        try:
            async with asyncio.timeout(timeout_s):  # no Task per wait, unlike wait_for
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    def take(self) -> Taken:
        """Everything pending, coalesced, plus the end state once the text is drained."""
        taken = Taken(text="".join(self._pending), pieces=len(self._pending))
        self._pending.clear()
        self._pending_bytes = 0
        self._wake.clear()
        taken.finish_reason, taken.error = self.finish_reason, self.error
        return taken
