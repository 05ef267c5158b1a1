"""The process's Redis: a real server from `LORAPLEX_REDIS_URL`, or an in-process stand-in.

Tenant quotas (rate limits, concurrency leases) and resumable streams keep
their state in Redis. With a URL they talk to that server. Without one (the embedded
all-in-one, `loraplex up`) they talk to `fakeredis`, a Redis implemented in Python, with Lua
scripting (through `lupa`, Lua 5.1 like Redis), so the very same admission scripts run and
the limits hold exactly as with a real Redis.

The stand-in lives in this process's memory: every client `open_redis("")` returns shares one
server (`EMBEDDED_SERVER`), so admission, resumable streams and anything else in the process
see the same keys; another process sees none of them. Embedded mode is therefore one API
process — several API replicas need a real Redis to share their limits.
"""

from __future__ import annotations

from typing import Any

import fakeredis
from redis.asyncio import BlockingConnectionPool, Redis

# The one in-process server of this process (its keys die with it).
EMBEDDED_SERVER = fakeredis.FakeServer()


def embedded_redis(server: fakeredis.FakeServer | None = None) -> Redis:
    """A client on the in-process `server`; on a new, empty server of its own when None
    (tests use that for isolation; the process's shared one is `EMBEDDED_SERVER`)."""
    return fakeredis.FakeAsyncRedis(
        server=server if server is not None else fakeredis.FakeServer(),
        decode_responses=False,  # bytes, as from `Redis.from_url`
    )


def open_redis(
    url: str, *, max_connections: int = 64, pool_timeout_s: float = 1.0, **options: Any
) -> Redis:
    """A client for `url`, or, when `url` is empty, one on the process's embedded server.

    A real server's client holds at most `max_connections` (a `BlockingConnectionPool`: a
    call that finds them all busy waits up to `pool_timeout_s`, then raises redis'
    `ConnectionError`). `options` go to the connections (timeouts, retries); the embedded
    server answers in-process and takes none.
    """
    if url:
        pool = BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=pool_timeout_s, **options
        )
        return Redis.from_pool(pool)  # the client closes its pool with itself
    return embedded_redis(EMBEDDED_SERVER)
