"""The idle and total deadlines of a stream's engine reads, with one timer per stream.

A stream reads one engine chunk per token. Wrapping each read in `asyncio.timeout` made a
timeout object and a timer, pushed onto the loop's heap and cancelled again, per token:
profiled at 64 streams (cProfile, stand-in engine), the timeouts were a quarter of the
pump's own time per chunk. Here a stream has one `WaitTimer`, set for the deadline of the
read in progress and moved when it fires after a chunk arrived. A healthy stream moves it
once per idle timeout, not once per token; a silent one times out exactly as with `asyncio.timeout`:
`idle_timeout_s` after its read began (or at the whole request's deadline), its read
cancelled and `PhaseTimeout` raised with the phase's code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType

from loraplex.gateway.wait_timer import WaitTimer


class PhaseTimeout(Exception):
    """A phase of the request ran past its deadline; `code` names it (`idle_timeout` ...)."""

    def __init__(self, code: str):
        self.code = code


class ReadDeadline:
    """Deadlines for the reads of one task, each read a `with` block: each may take
    `idle_s`, all of them end by `deadline_total` (both on `clock`, which `asyncio`'s timer
    follows in real time)."""

    def __init__(self, idle_s: float, deadline_total: float, clock: Callable[[], float]):
        self._idle_s, self._total, self._clock = idle_s, deadline_total, clock
        self._task = asyncio.current_task()
        self._began = clock()  # when the read in progress (or the last one) began
        self._reading = False
        self._timer = WaitTimer(self._read_ends, self._time_out, clock)
        self._expired: str | None = None

    def _deadline(self) -> float:
        return min(self._began + self._idle_s, self._total)

    def _code(self) -> str:
        return "idle_timeout" if self._began + self._idle_s < self._total else "total_timeout"

    def __enter__(self) -> None:
        """A read begins: `PhaseTimeout` at once when its deadline has passed, else the
        timer is set for it. A `with` block rather than a wrapper coroutine: the relay reads
        once per token, and each coroutine layer costs every token a few µs (issue #50)."""
        self._began = self._clock()
        if self._deadline() <= self._began:
            raise PhaseTimeout(self._code())
        self._reading = True
        self._timer.arm()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """The read ended; cancelled by the timer, it raises `PhaseTimeout` instead (a
        cancellation from elsewhere, such as the client leaving, stays one)."""
        self._reading = False
        if kind is asyncio.CancelledError:
            expired, self._expired = self._expired, None
            if expired is not None and self._task is not None and self._task.uncancel() == 0:
                raise PhaseTimeout(expired) from None

    def _read_ends(self) -> float | None:
        return self._deadline() if self._reading else None

    def _time_out(self) -> None:
        """The read in progress is past its deadline: cancel it (`read` raises the timeout)."""
        if self._task is not None:
            self._expired = self._code()
            self._task.cancel()

    def close(self) -> None:
        """No more reads: the timer goes."""
        self._timer.cancel()
