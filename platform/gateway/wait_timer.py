"""One timer for a series of waits, instead of one per wait.

A stream waits once per token (for the engine's next chunk, for its client's next write),
and each wait has a limit (the idle timeout, the heartbeat interval). An `asyncio.timeout`
per wait makes a timeout object and a heap timer and cancels them again, per token. A
`WaitTimer` is set once, for the end of the wait in progress; when it fires it asks when the
wait now in progress ends: not yet, and it sets itself for then (a steady stream moves it
once per limit, not once per token); passed, and it calls `expire`; no wait in progress, and
it stops until the next `arm`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class WaitTimer:
    """Calls `expire` once the wait in progress passes its end; `end()` says when that is on
    `clock` (None: no wait in progress)."""

    __slots__ = ("_clock", "_end", "_expire", "_handle", "_loop")

    def __init__(
        self,
        end: Callable[[], float | None],
        expire: Callable[[], None],
        clock: Callable[[], float],
    ):
        self._end, self._expire, self._clock = end, expire, clock
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """A wait began: set the timer for its end unless it is already set."""
        if self._handle is None:
            self._fire()

    def _fire(self) -> None:
        self._handle = None
        end = self._end()
        if end is None:
            return
        remaining = end - self._clock()
        if remaining > 0:
            self._handle = self._loop.call_later(remaining, self._fire)
        else:
            self._expire()

    def cancel(self) -> None:
        """No more waits."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
