"""The composition root: every long-lived part of an API process, built in one place.

`running_services(settings, db)` builds them from the settings, starts the ones with
background work, yields a typed `Services`, and stops everything in the reverse order of
start-up — also when start-up fails half-way (each part is pushed onto an `AsyncExitStack`
the moment it exists). Handlers never reach into `app.state`: `provide(name)` turns each
field into a Litestar dependency of the same name and type (`gateway: Gateway`,
`job_queue: JobQueue`, ...); middleware and guards, which get no dependencies, use
`services_of(app)`.

One Redis client (one capped connection pool) serves the process: admission scripts,
resumable streams' writers, the sign-in throttle and the change feed; readers of resumable
streams, which block in XREAD, have a capped pool of their own (`readers_redis`). Without
`LORAPLEX_REDIS_URL` (the embedded all-in-one) it is the in-process stand-in from
`loraplex.redis_client`, so quotas and resumable streams behave the same.
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
from loraplex.api.upload_slots import UploadSlots
from loraplex.auth.authenticator import KeyAuthenticator
from loraplex.auth.sso.service import SsoService
from loraplex.changes import Announcement, Change, ChangeFeed
from loraplex.connections import open_object_store, readers_redis, shared_redis
from loraplex.control.audit.limit_log import LimitLog
from loraplex.control.budgets.alerts import BudgetAlerts
from loraplex.control.budgets.book import BudgetBook
from loraplex.control.canary.analyst import CanaryAnalyst
from loraplex.control.canary.samples import PromptSampler
from loraplex.control.canary.window import CanaryWindow
from loraplex.cpu_pool import CpuPool
from loraplex.finetune.queue import JobQueue
from loraplex.gateway.admission import OverloadShedder, TenantQuotas
from loraplex.gateway.admission.budgets import BudgetGuard
from loraplex.gateway.admission.places import PlaceBook
from loraplex.gateway.gate import EngineGate
from loraplex.gateway.lane import PriorityLane
from loraplex.gateway.limits import TenantLimits
from loraplex.gateway.pump import StreamLimits
from loraplex.gateway.resolve import ModelResolver
from loraplex.gateway.resume import ResumableStreams
from loraplex.gateway.resume_readers import ResumeReaders
from loraplex.gateway.routing import EngineRouter
from loraplex.gateway.service import Gateway
from loraplex.gateway.usage import SqlUsageWriter, UsageRecorder
from loraplex.observability.loop_lag import LoopLagMonitor
from loraplex.serving.disk_cache import DiskCache
from loraplex.serving.live import (
    AliasWatcher,
    DbFacts,
    LiveConfig,
    LivePlacement,
    LocalOps,
    OpsRouter,
    UploadWatcher,
)
from loraplex.serving.policy import PolicyConfig
from loraplex.serving.probes import ProbeConfig, Prober, ProbeStore
from loraplex.serving.registry import EngineRegistry
from loraplex.settings import Settings
from loraplex.web.sign_in_throttle import SignInThrottle
from loraplex.workers.celery_app import make_celery

log = logging.getLogger("loraplex.services")
# argon2 takes 64 MiB a check; a worker idles at ~60 MB of address space.
PASSWORD_WORKER_MEMORY = 512 * 2**20
PASSWORD_CHECK_TIMEOUT_S = 30.0


@dataclass
class Services:
    """The long-lived parts of one API process; built and stopped by `running_services`."""

    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    redis: Redis
    store: ObjectStore
    cpu_pool: CpuPool  # checks of tenant files, in worker processes
    upload_slots: UploadSlots
    password_pool: CpuPool  # sign-in checks: a worker of their own, never behind an upload
    limit_log: LimitLog  # which tenant tripped which limit, in its audit log
    changes: ChangeFeed
    authenticator: KeyAuthenticator
    tenant_limits: TenantLimits
    sign_in_throttle: SignInThrottle
    sso: SsoService  # console sign-in through OpenID Connect providers
    registry: EngineRegistry | None  # None: this process polls no engines (tests swap it)
    disk_cache: DiskCache
    placement: LivePlacement | None
    usage: UsageRecorder
    quotas: TenantQuotas
    budgets: BudgetGuard  # money budgets, reserved beside the token quotas
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
        failover_timeout_s=settings.failover_timeout_s,
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
        policy=PolicyConfig(warm_on_upload=settings.warm_on_upload),
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
        uploads=UploadWatcher(sessions) if settings.warm_on_upload else None,
    )


def correctness_probes(
    settings: Settings,
    placement: LivePlacement,
    sessions: async_sessionmaker[AsyncSession],
    store: ObjectStore,
) -> Prober:
    """Probes recorded at promotion and replayed after each load, watching `placement`."""
    config = ProbeConfig(every_s=settings.probe_every_s, max_tokens=settings.probe_max_tokens)
    prober = Prober(ProbeStore(sessions), placement, store, config)
    placement.watcher = prober
    return prober


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
    places: PlaceBook,
    reader_redis: Redis | None = None,
    budgets: BudgetGuard | None = None,
    canary: CanaryWindow | None = None,
    samples: PromptSampler | None = None,
) -> Gateway:
    """The inference path: resolution, the engine gate, the relay and resumable streams."""
    gate = EngineGate(
        quotas,
        quotas.overload,
        router,
        places,
        busy_wait_s=settings.engine_queue_wait_s,
        ttft_slo_s=settings.engine_ttft_slo_s,
    )
    router.registry.admission_view = gate.engine_view  # the engines page reads the core's view
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
        resumable=ResumableStreams(
            redis, settings.resume_window_s, settings.stream_heartbeat_s, reader_redis
        ),
        readers=ResumeReaders(
            TenantQuotas(
                redis,
                lease_s=settings.concurrency_lease_s,
                fail_mode=settings.ratelimit_fail_mode,
                timeout_s=settings.ratelimit_redis_timeout_s,
                key_prefix="loraplex:resume:",
                reason_prefix="resume_",
            ),
            settings.resume_max_readers,
        ),
        budgets=budgets,
        canary=canary,
        samples=samples,
    )


def drop_cached_access(
    authenticator: KeyAuthenticator, limits: TenantLimits, book: BudgetBook | None = None
) -> Callable[[Announcement], None]:
    """The change feed's listener: each announcement drops the copies it makes wrong."""

    def listener(announcement: Announcement) -> None:
        if announcement.change is Change.KEY_REVOKED:
            authenticator.forget(announcement.subject)
        elif announcement.change is Change.TENANT_ACCESS:
            authenticator.forget_all()
        elif announcement.change is Change.TENANT_LIMITS:
            limits.forget_all()
        elif announcement.change is Change.BUDGETS and book is not None:
            book.forget_all()

    return listener


def resync_engines(registry: EngineRegistry) -> Callable[[Announcement], None]:
    """The change feed's listener: an engine drained, failed or came back somewhere, or its
    agent registered a new secret."""

    def listener(announcement: Announcement) -> None:
        if announcement.change is Change.ENGINE_STATE:
            registry.sync_now()

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
        reader_redis = readers_redis(settings) if settings.redis_url else redis
        if reader_redis is not redis:
            stack.push_async_callback(reader_redis.aclose)
        store = open_object_store(settings)
        try:  # creates the bucket on first start; an outage now is reported by uploads later
            await anyio.to_thread.run_sync(store.check)
        except StoreError as exc:
            log.warning("object store not ready at startup: %s", exc)
        loop_lag = LoopLagMonitor(settings.event_loop_lag_warn_s)
        loop_lag.start()
        stack.push_async_callback(loop_lag.stop)
        cpu_pool = CpuPool(
            settings.cpu_pool_workers, settings.cpu_pool_memory_bytes, settings.cpu_pool_timeout_s
        )
        stack.callback(cpu_pool.close)
        password_pool = CpuPool(1, PASSWORD_WORKER_MEMORY, PASSWORD_CHECK_TIMEOUT_S)
        stack.callback(password_pool.close)
        authenticator = KeyAuthenticator(sessions)
        tenant_limits = TenantLimits(sessions)
        changes = ChangeFeed(redis if settings.redis_url else None)
        budget_book = BudgetBook(sessions)
        changes.listen(drop_cached_access(authenticator, tenant_limits, budget_book))
        await changes.start()
        stack.push_async_callback(changes.stop)
        job_queue = JobQueue(make_celery(settings))
        stack.callback(job_queue.celery.close)
        disk_cache = DiskCache(settings.data_dir / "cache", settings.disk_cache_bytes, store)
        stack.push_async_callback(disk_cache.aclose)
        registry = EngineRegistry.from_settings(settings, session_factory=sessions)
        changes.listen(resync_engines(registry))
        await registry.start()
        stack.push_async_callback(registry.stop)
        placement = live_placement(settings, registry, disk_cache, sessions, tenant_limits)
        await placement.start()
        stack.push_async_callback(placement.stop)
        prober = correctness_probes(settings, placement, sessions, store)
        await prober.start()
        stack.push_async_callback(prober.stop)  # before placement's: it replays through it
        limit_log = LimitLog(sessions)
        stack.push_async_callback(_run_in_background(limit_log.run(), limit_log.stop))
        usage = UsageRecorder(SqlUsageWriter(sessions))
        stack.push_async_callback(_run_in_background(usage.run(), usage.stop))
        quotas = tenant_quotas(settings, redis)
        canary = CanaryWindow(redis)  # canary figures in Redis; every replica's analyst reads them
        stack.push_async_callback(_run_in_background(canary.run(), canary.stop))
        samples = PromptSampler(redis)  # live prompts of canaries whose tenant opted in
        stack.push_async_callback(_run_in_background(samples.run(), samples.stop))
        analyst = CanaryAnalyst(sessions, canary, samples=samples, queue=job_queue)
        stack.push_async_callback(_run_in_background(analyst.run(), analyst.stop))
        alerts = BudgetAlerts(sessions, settings.currency, settings.budget_webhook_url)
        stack.push_async_callback(_run_in_background(alerts.run(), alerts.stop))
        budgets = BudgetGuard(quotas, budget_book, alerts, settings.currency)
        router = EngineRouter(registry, disk_cache, placement)
        places = await anyio.to_thread.run_sync(  # a profile's places: the simulator's search
            PlaceBook.sized,
            settings.engine_max_in_flight,
            settings.admission_parallelism,
            settings.admission_profiles,
            not settings.engine_admission,
        )
        services = Services(
            settings=settings,
            sessions=sessions,
            redis=redis,
            store=store,
            cpu_pool=cpu_pool,
            password_pool=password_pool,
            limit_log=limit_log,
            upload_slots=UploadSlots(settings.uploads_per_tenant, settings.uploads_in_progress),
            changes=changes,
            authenticator=authenticator,
            tenant_limits=tenant_limits,
            sign_in_throttle=SignInThrottle(
                settings.login_attempts_per_minute, redis if settings.redis_url else None
            ),
            sso=SsoService(
                settings.oidc_providers, redis, settings.oidc_recheck_s, settings.secret_key
            ),
            registry=registry,
            disk_cache=disk_cache,
            placement=placement,
            usage=usage,
            quotas=quotas,
            budgets=budgets,
            gateway=gateway(
                settings,
                sessions,
                router,
                usage,
                quotas,
                redis,
                places,
                reader_redis,
                budgets,
                canary=canary,
                samples=samples,
            ),
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
