"""Per-version request figures of canary aliases, in Redis, shared by every API replica.

Usage rows count errors per minute but not TTFT, and mix a tenant's own 4xx with server
errors; the analysis needs both sides of one alias over the same seconds. So each request
through an alias with a canary (the gateway marks its target) is counted here: requests,
server errors and a TTFT histogram per (alias, version, 5-second bucket), in one Redis hash.
`record` only bumps counters in memory (the hot path never waits on Redis); `run` adds
them to Redis every second with HINCRBY, so every replica's requests land in the same hashes.

The histogram's bins grow by 10 %, so a p95 read from it is within 10 % of the true one;
its size does not depend on traffic (a few dozen fields per bucket).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from redis.asyncio import Redis

from loraplex.control.canary.flushing import FlushLoop
from loraplex.control.canary.policy import VersionStats

log = logging.getLogger("loraplex.canary.window")

BUCKET_S = 5
MAX_WINDOW_S = 3600  # the longest analysis window; buckets expire after it
BIN_GROWTH = 1.1  # TTFT bin k holds [1.1^k, 1.1^(k+1)) milliseconds
KEY_PREFIX = "loraplex:canary:"

# Codes of a failed request that are the platform's or the engine's fault. Anything else
# (the engine refusing the request as invalid, the client leaving or reading too slowly)
# is the tenant's own doing and does not count against a canary.
SERVER_ERROR_CODES = frozenset({
    "engine_error", "engine_unavailable", "engine_died", "queue_timeout", "ttft_timeout",
    "idle_timeout", "total_timeout", "object_store_unavailable", "object_store_error",
})  # fmt: skip


def ttft_bin(ttft_s: float) -> int:
    """The histogram bin of a time to first token."""
    return max(0, math.floor(math.log(max(ttft_s * 1000, 1.0)) / math.log(BIN_GROWTH)))


def p95_of(bins: Mapping[int, int]) -> float | None:
    """The 95th percentile (the upper edge of its bin, in seconds); None for no samples."""
    total = sum(bins.values())
    if total == 0:
        return None
    wanted, seen = math.ceil(total * 0.95), 0
    for k in sorted(bins):
        seen += bins[k]
        if seen >= wanted:
            return float(BIN_GROWTH ** (k + 1) / 1000)
    return None  # unreachable: the bins add up to total


@dataclass(slots=True)
class _Counts:
    requests: int = 0
    server_errors: int = 0
    ttft_bins: Counter[int] = field(default_factory=Counter)


class CanaryWindow:
    """Counts canary-alias requests in memory and adds them to Redis in the background."""

    def __init__(self, redis: Redis, *, clock: Callable[[], float] = time.time) -> None:
        self._redis = redis
        self._clock = clock  # epoch seconds: buckets must line up across replicas
        self._pending: dict[tuple[UUID, UUID, int], _Counts] = {}
        self._loop = FlushLoop(self.flush, "canary window counts")

    def record(
        self, alias_id: UUID, version_id: UUID, error_code: str | None, ttft_s: float | None
    ) -> None:
        """Count one finished request of `version_id` through the alias (event loop only)."""
        key = (alias_id, version_id, int(self._clock() // BUCKET_S))
        counts = self._pending.setdefault(key, _Counts())
        counts.requests += 1
        counts.server_errors += error_code in SERVER_ERROR_CODES
        if ttft_s is not None:
            counts.ttft_bins[ttft_bin(ttft_s)] += 1

    async def flush(self) -> None:
        """Add the pending counts to Redis; on failure they stay pending."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for (alias_id, version_id, bucket), counts in pending.items():
                    name = _key(alias_id, version_id, bucket)
                    pipe.hincrby(name, "n", counts.requests)
                    pipe.hincrby(name, "e", counts.server_errors)
                    for k, n in counts.ttft_bins.items():
                        pipe.hincrby(name, f"t{k}", n)
                    pipe.expire(name, MAX_WINDOW_S + 2 * BUCKET_S)
                await pipe.execute()
        except BaseException:
            for key, counts in pending.items():  # put back: the next flush writes them once
                mine = self._pending.setdefault(key, _Counts())
                mine.requests += counts.requests
                mine.server_errors += counts.server_errors
                mine.ttft_bins.update(counts.ttft_bins)
            raise

    async def read(
        self, alias_id: UUID, version_id: UUID, since: float, until: float
    ) -> VersionStats:
        """A version's figures through the alias over [since, until] (epoch seconds)."""
        first, last = int(since // BUCKET_S), int(until // BUCKET_S)
        first = max(first, last - MAX_WINDOW_S // BUCKET_S)
        async with self._redis.pipeline(transaction=False) as pipe:
            for bucket in range(first, last + 1):
                pipe.hgetall(_key(alias_id, version_id, bucket))
            hashes = await pipe.execute()
        requests = errors = 0
        bins: Counter[int] = Counter()
        for stored in hashes:
            for name, value in stored.items():
                name = name.decode() if isinstance(name, bytes) else name
                if name == "n":
                    requests += int(value)
                elif name == "e":
                    errors += int(value)
                else:
                    bins[int(name[1:])] += int(value)
        return VersionStats(requests, errors, p95_of(bins))

    async def run(self) -> None:
        """Write to Redis every second until `stop()`."""
        await self._loop.run()

    async def stop(self) -> None:
        """End `run()` after one more write."""
        await self._loop.stop()


def _key(alias_id: UUID, version_id: UUID, bucket: int) -> str:
    return f"{KEY_PREFIX}{alias_id.hex}:{version_id.hex}:{bucket}"
