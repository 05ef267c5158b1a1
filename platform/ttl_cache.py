"""A short-lived cache for the request path, where concurrent misses share one load.

Without sharing, the moment an entry expires every request in flight misses together and
each runs the same database query: at 64 concurrent streams that stampede cost more CPU
than everything else the gateway does per request. Here the first miss starts the load and
the others await the same result. A failed load is not cached: each caller sees the error,
and the next request tries again.

With `stale_s`, an entry past its `ttl_s` but younger than `ttl_s + stale_s` is still
answered at once while one background load refreshes it (stale-while-revalidate): a busy
key never makes a request wait for the database, only a key idle for longer than that does.
A failed refresh leaves the stale entry to age out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Values kept `ttl_s` seconds (served `stale_s` longer while a refresh runs); at most
    `max_entries` (then it starts over)."""

    def __init__(
        self,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
        stale_s: float = 0.0,
    ) -> None:
        self.ttl_s, self.stale_s = ttl_s, stale_s
        self._clock, self._max_entries = clock, max_entries
        self._values: dict[K, tuple[float, V]] = {}  # key -> (fresh until, value)
        self._loading: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The cached value, or the one `load` returns (shared with concurrent callers)."""
        hit = self._values.get(key)
        now = self._clock()
        if hit is not None and hit[0] > now:
            return hit[1]
        pending = self._start(key, load)
        if hit is not None and hit[0] + self.stale_s > now:
            return hit[1]  # stale but usable: the refresh runs without anyone waiting
        # Shielded: one caller giving up must not cancel the load the others wait for.
        return await asyncio.shield(pending)

    def _start(self, key: K, load: Callable[[], Awaitable[V]]) -> asyncio.Future[V]:
        """The load in progress for `key`, started if there is none."""
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key, load))
            pending.add_done_callback(_retrieve)
            self._loading[key] = pending
        return pending

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
