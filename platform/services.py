"""The composition root: every long-lived part of an API process, built in one place.

`running_services(settings, db)` builds them from the settings, starts the ones with
background work, yields a typed `Services`, and stops everything in the reverse order of
start-up — also when start-up fails half-way (each part is pushed onto an `AsyncExitStack`
the moment it exists). Handlers never reach into `app.state`: `provide(name)` turns each
field into a Litestar dependency of the same name and type (`gateway: Gateway`,
`job_queue: JobQueue`, ...); middleware and guards, which get no dependencies, use
`services_of(app)`.

One Redis client (one connection pool) serves the process: admission scripts, resumable
streams, the sign-in throttle and the change feed. Without `LORAPLEX_REDIS_URL` (the
embedded all-in-one) it is the in-process stand-in from `loraplex.redis_client`, so quotas
and resumable streams behave the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
from advanced_alchemy.extensions.litestar import SQLAlchemyAsyncConfig
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.adapters.errors import StoreError
from loraplex.adapters.store import ObjectStore
from loraplex.auth.authenticator import KeyAuthenticator
from loraplex.changes import Announcement, Change, ChangeFeed
from loraplex.connections import open_object_store, shared_redis
from loraplex.finetune.queue import JobQueue
from loraplex.gateway.admission import OverloadShedder, TenantQuotas
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.lane import PriorityLane
from loraplex.gateway.limits import TenantLimits
from loraplex.gateway.pump import StreamLimits
from loraplex.gateway.resolve import ModelResolver
from loraplex.gateway.resume import ResumableStreams
from loraplex.gateway.routing import EngineRouter
from loraplex.gateway.service import Gateway
from loraplex.gateway.usage import SqlUsageWriter, UsageRecorder
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.live import (
    AliasWatcher,
    DbFacts,
    LiveConfig,
    LivePlacement,
    LocalOps,
    OpsRouter,
)
from loraplex.serving.registry import EngineRegistry
from loraplex.settings import Settings
from loraplex.web.session import SignInThrottle
from loraplex.workers.celery_app import make_celery

log = logging.getLogger("loraplex.services")


@dataclass
class Services:
    """The long-lived parts of one API process; built and stopped by `running_services`."""

    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    redis: Redis
    store: ObjectStore
    changes: ChangeFeed
    authenticator: KeyAuthenticator
    tenant_limits: TenantLimits
    sign_in_throttle: SignInThrottle
    registry: EngineRegistry | None  # None: this process polls no engines (tests swap it)
    disk_cache: DiskCache
    placement: LivePlacement | None
    usage: UsageRecorder
    quotas: TenantQuotas
    gateway: Gateway
    job_queue: JobQueue


def stream_limits(settings: Settings) -> StreamLimits:
    """The streaming limits the settings ask for."""
    return StreamLimits(
        buffer_bytes=settings.stream_buffer_bytes,
        heartbeat_s=settings.stream_heartbeat_s,
        queue_timeout_s=settings.queue_timeout_s,
        ttft_timeout_s=settings.ttft_timeout_s,
        idle_timeout_s=settings.idle_timeout_s,
        total_timeout_s=settings.total_timeout_s,
    )


def live_placement(
    settings: Settings,
    registry: EngineRegistry,
    disk_cache: DiskCache,
    sessions: async_sessionmaker[AsyncSession],
    tenant_limits: TenantLimits,
) -> LivePlacement:
    """One policy core per base model over the registry's engines. Engines without an
    `agent_url` (single-node mode) load from this process's disk cache."""
    config = LiveConfig(
        queue_timeout_s=settings.queue_timeout_s,
        disk_budget_bytes=settings.disk_cache_bytes,
        reconcile_every_s=settings.engine_health_interval_s,
    )
    return LivePlacement(
        registry,
        OpsRouter(LocalOps(disk_cache), agent_token=settings.agent_token),
        DbFacts(sessions, tenant_limits.get),
        config,
        hints=AliasWatcher(sessions),
    )


def tenant_quotas(settings: Settings, redis: Redis) -> TenantQuotas:
    """Tenant quotas, concurrency leases and overload shedding on the shared client."""
    return TenantQuotas(
        redis,
        lease_s=settings.concurrency_lease_s,
        fail_mode=settings.ratelimit_fail_mode,
        timeout_s=settings.ratelimit_redis_timeout_s,
        overload=OverloadShedder(budget_s=settings.admission_ttft_budget_s),
    )


def gateway(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    router: EngineRouter,
    usage: UsageRecorder,
    quotas: TenantQuotas,
    redis: Redis,
) -> Gateway:
    """The inference path: resolution, the engine gate, the relay and resumable streams."""
    gate = EngineGate(
        quotas,
        quotas.overload,
        router,
        settings.admission_parallelism,
        settings.engine_max_in_flight,
        queue_wait_s=settings.engine_queue_wait_s,
        adaptive=settings.engine_adaptive_cap,
        ttft_slo_s=settings.engine_ttft_slo_s,
    )
    lane = PriorityLane(
        settings.relay_yield_to_new_s,
        enabled=settings.relay_yield_to_new_s > 0,
        pace_s=settings.relay_pace_s,
    )
    return Gateway(
        ModelResolver(sessions),
        router,
        usage,
        stream_limits(settings),
        gate=gate,
        lane=lane,
        resumable=ResumableStreams(redis, settings.resume_window_s, settings.stream_heartbeat_s),
    )


def drop_cached_access(
    authenticator: KeyAuthenticator, limits: TenantLimits
) -> Callable[[Announcement], None]:
    """The change feed's listener: each announcement drops the copies it makes wrong."""

    def listener(announcement: Announcement) -> None:
        if announcement.change is Change.KEY_REVOKED:
            authenticator.forget(announcement.subject)
        elif announcement.change is Change.TENANT_ACCESS:
            authenticator.forget_all()
        elif announcement.change is Change.TENANT_LIMITS:
            limits.forget_all()

    return listener


@contextlib.asynccontextmanager
async def running_services(
    settings: Settings, db: SQLAlchemyAsyncConfig
) -> AsyncIterator[Services]:
    """Build and start the process's services; stop them in reverse order after."""
    async with AsyncExitStack() as stack:
        sessions = db.create_session_maker()
        redis = shared_redis(settings)
        stack.push_async_callback(redis.aclose)
        store = open_object_store(settings)
        try:  # creates the bucket on first start; an outage now is reported by uploads later
            await anyio.to_thread.run_sync(store.check)
        except StoreError as exc:
            log.warning("object store not ready at startup: %s", exc)
        authenticator = KeyAuthenticator(sessions)
        tenant_limits = TenantLimits(sessions)
        changes = ChangeFeed(redis if settings.redis_url else None)
        changes.listen(drop_cached_access(authenticator, tenant_limits))
        await changes.start()
        stack.push_async_callback(changes.stop)
        job_queue = JobQueue(make_celery(settings))
        stack.callback(job_queue.celery.close)
        disk_cache = DiskCache(settings.data_dir / "cache", settings.disk_cache_bytes, store)
        stack.push_async_callback(disk_cache.aclose)
        registry = EngineRegistry.from_settings(settings, session_factory=sessions)
        await registry.start()
        stack.push_async_callback(registry.stop)
        placement = live_placement(settings, registry, disk_cache, sessions, tenant_limits)
        await placement.start()
        stack.push_async_callback(placement.stop)
        usage = UsageRecorder(SqlUsageWriter(sessions))
        stack.push_async_callback(_run_in_background(usage.run(), usage.stop))
        quotas = tenant_quotas(settings, redis)
        router = EngineRouter(registry, disk_cache, placement)
        services = Services(
            settings=settings,
            sessions=sessions,
            redis=redis,
            store=store,
            changes=changes,
            authenticator=authenticator,
            tenant_limits=tenant_limits,
            sign_in_throttle=SignInThrottle(
                settings.login_attempts_per_minute, redis if settings.redis_url else None
            ),
            registry=registry,
            disk_cache=disk_cache,
            placement=placement,
            usage=usage,
            quotas=quotas,
            gateway=gateway(settings, sessions, router, usage, quotas, redis),
            job_queue=job_queue,
        )
        stack.push_async_callback(services.gateway.aclose)  # before usage: pumps record usage
        yield services


def _run_in_background(work: Any, stop: Callable[[], Any]) -> Callable[[], Any]:
    """Start `work` as a task now; the returned callback calls `stop()` and awaits it."""
    task = asyncio.create_task(work)

    async def stopped() -> None:
        await stop()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return stopped
