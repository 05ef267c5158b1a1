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
    if not settings.redis_url:
        return open_redis("")
    return connect_redis(settings.redis_url, settings.ratelimit_redis_timeout_s)


def connect_redis(url: str, connect_timeout_s: float) -> Redis:
    """A client of the server at `url` that connects within `connect_timeout_s` and retries
    a call once (a connection Redis dropped).

    No `socket_timeout`: redis-py enforces one with `asyncio.wait_for`, a new Task per
    command, the largest single cost of admission under a burst. Callers bound their own
    waits instead: admission with its deadline (`redis_deadline`), a resumable stream's
    blocking read with `asyncio.timeout`, a publish with its own; the change feed's
    subscription waits for messages as long as there are none.
    """
    return open_redis(
        url, socket_connect_timeout=connect_timeout_s, retry=Retry(NoBackoff(), retries=1)
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
