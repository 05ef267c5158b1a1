"""Event-loop lag: how late the loop runs a timer, measured all the time, logged when large.

Every stream, admission decision and health probe of an API process shares one event loop.
Anything that holds it (a parse of tenant input, a big JSON encode, a collection of the
garbage collector) delays them all by the same amount, and nothing else shows it: a stream's
gap looks like a slow engine. A task sleeps `interval_s` again and again; the time past the
deadline is the lag, observed into `loraplex_event_loop_lag_seconds` and logged above
`warn_s` so a stall can be matched to the request that caused it by time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from loraplex.observability.metrics import EVENT_LOOP_LAG

log = logging.getLogger("loraplex.loop_lag")
INTERVAL_S = 0.05


class LoopLagMonitor:
    """Samples the running loop's lag until stopped."""

    def __init__(self, warn_s: float, interval_s: float = INTERVAL_S) -> None:
        self.warn_s, self.interval_s = warn_s, interval_s
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin sampling on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sample(self) -> None:
        while True:
            due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, time.perf_counter() - due)
            EVENT_LOOP_LAG.observe(lag)
            self.worst_s = max(self.worst_s, lag)
            if lag > self.warn_s:
                log.warning("event loop lag: %.3f s (a timer ran that late)", lag)
