"""The process's connections to what it depends on: Redis and the object store.

One builder per connection, used by every process kind — the API (`loraplex.services`),
the Celery workers, the node agent and the CLI — so each reads the same settings the same
way. The database's is `loraplex.db.config.sqlalchemy_config`.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from loraplex.adapters.store import ObjectStore, open_store
from loraplex.redis_client import open_redis
from loraplex.settings import Settings


def shared_redis(settings: Settings) -> Redis:
    """The process's one Redis client: the URL's server, or the embedded stand-in."""
    return _redis_of(settings, settings.redis_max_connections)


def readers_redis(settings: Settings) -> Redis:
    """A client with a pool of its own for resumable streams' readers: a reader holds its
    connection through each blocking read, so on the shared pool enough readers would leave
    admission none (and admission fails closed for every tenant). When this pool is full a
    reader waits for a connection, then ends with its `stream_lost` event, ready to resume."""
    return _redis_of(settings, settings.redis_reader_connections)


def _redis_of(settings: Settings, max_connections: int) -> Redis:
    """A client of the settings' server with a pool of `max_connections`, or the stand-in."""
    if not settings.redis_url:
        return open_redis("")
    return connect_redis(
        settings.redis_url, settings.ratelimit_redis_timeout_s, max_connections=max_connections
    )


def connect_redis(url: str, connect_timeout_s: float, max_connections: int = 64) -> Redis:
    """A client of the server at `url` that connects within `connect_timeout_s`, retries a
    call once (a connection Redis dropped), and holds at most `max_connections`.

    No `socket_timeout` (set to None: redis-py 8 defaults it to 5 s, which cut every
    resumable stream's blocking read at the default 5 s heartbeat): redis-py enforces one
    with `asyncio.wait_for`, a new Task per command, the largest single cost of admission
    under a burst. Callers bound their own
    waits instead: admission with its deadline (`redis_deadline`), a resumable stream's
    blocking read with `asyncio.timeout`, a publish with its own; the change feed's
    subscription waits for messages as long as there are none.

    The pool blocks when every connection is busy, for `connect_timeout_s` at most, then
    raises redis' `ConnectionError` (a 503 to the client, `loraplex.errors`): an unbounded
    pool let enough callers open enough connections to exhaust the server for everyone.
    """
    return open_redis(
        url,
        max_connections=max_connections,
        pool_timeout_s=connect_timeout_s,
        socket_connect_timeout=connect_timeout_s,
        socket_timeout=None,
        retry=Retry(NoBackoff(), retries=1),
    )


def open_object_store(settings: Settings) -> ObjectStore:
    """The object store the settings name: a local directory (embedded) or S3."""
    if settings.object_store == "s3":
        return open_store(
            "s3",
            bucket=settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url or None,
            region=settings.s3_region,
            access_key=settings.s3_access_key_id or None,
            secret_key=settings.s3_secret_access_key or None,
            create_bucket=True,
        )
    return open_store("local", root=settings.data_dir / "objects")
