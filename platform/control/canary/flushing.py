"""What the canary's in-memory tallies share: a loop that writes them to Redis each second."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("loraplex.canary")

FLUSH_EVERY_S = 1.0


class FlushLoop:
    """Runs `flush` each `FLUSH_EVERY_S` until `stop()`, and once more on its way out; a
    failed flush is logged (as of `what`) and the next one tries again."""

    def __init__(self, flush: Callable[[], Awaitable[None]], what: str) -> None:
        self._flush, self._what = flush, what
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        """Flush every second until `stop()`."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), FLUSH_EVERY_S)
            try:
                await self._flush()
            except Exception:
                log.warning(
                    "flush of the %s failed; next try in a second", self._what, exc_info=True
                )

    async def stop(self) -> None:
        """End `run()` (it flushes once more on its way out)."""
        self._stopping.set()
