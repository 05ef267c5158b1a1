"""A short-lived cache for the request path, where concurrent misses share one load.

Without sharing, the moment an entry expires every request in flight misses together and
each runs the same database query: at 64 concurrent streams that stampede cost more CPU
than everything else the gateway does per request. Here the first miss starts the load and
the others await the same result. A failed load is not cached: each caller sees the error,
and the next request tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Values kept `ttl_s` seconds; at most `max_entries` (then it starts over)."""

    def __init__(
        self,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ) -> None:
        self.ttl_s, self._clock, self._max_entries = ttl_s, clock, max_entries
        self._values: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The cached value, or the one `load` returns (shared with concurrent callers)."""
        hit = self._values.get(key)
        if hit is not None and hit[0] > self._clock():
            return hit[1]
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key, load))
            pending.add_done_callback(_retrieve)
            self._loading[key] = pending
        # Shielded: one caller giving up must not cancel the load the others wait for.
        return await asyncio.shield(pending)

    def forget_where(self, predicate: Callable[[K, V], bool]) -> None:
        """Drop every entry for which `predicate(key, value)` holds."""
        for key in [k for k, (_, v) in self._values.items() if predicate(k, v)]:
            del self._values[key]

    def clear(self) -> None:
        """Drop every entry."""
        self._values.clear()

    async def _load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        try:
            value = await load()
        finally:
            self._loading.pop(key, None)
        if len(self._values) >= self._max_entries:
            self._values.clear()
        self._values[key] = (self._clock() + self.ttl_s, value)
        return value


def _retrieve(future: asyncio.Future[object]) -> None:
    # Every waiter may have gone away; fetch the outcome so asyncio does not log it.
    if not future.cancelled():
        future.exception()
