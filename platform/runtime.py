"""The long-lived parts of an API process, built at startup and stopped at shutdown.

Everything the request handlers reach through `app.state`: the key authenticator, the
object store, Redis (without `redis_url`, the embedded mode's in-process stand-in from
`loraplex.redis_client`, so quotas and resumable streams work the same), the engine
registry and its health poller, the node disk cache, the gateway and the usage recorder
(with its flush task).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from advanced_alchemy.extensions.litestar import SQLAlchemyAsyncConfig

from loraplex.adapters.errors import StoreError
from loraplex.api.deps import open_object_store
from loraplex.auth.authenticator import KeyAuthenticator
from loraplex.finetune.queue import JobQueue
from loraplex.gateway.admission import Admission, AdmissionController
from loraplex.gateway.gate import AdmissionGate
from loraplex.gateway.lane import PriorityLane
from loraplex.gateway.limits import TenantLimits
from loraplex.gateway.pump import StreamLimits
from loraplex.gateway.resolve import ModelResolver
from loraplex.gateway.resume import ResumableStreams
from loraplex.gateway.routing import EngineRouter
from loraplex.gateway.service import Gateway
from loraplex.gateway.usage import SqlUsageWriter, UsageRecorder
from loraplex.redis_client import open_redis
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

log = logging.getLogger("loraplex.runtime")


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


def live_placement(state: Any, settings: Settings, sessions: Any) -> LivePlacement:
    """The process's placement: one policy core per base model over the registry's engines.

    Single-node mode: engines without an `agent_url` load from this process's disk cache.
    """
    config = LiveConfig(
        queue_timeout_s=settings.queue_timeout_s,
        disk_budget_bytes=settings.disk_cache_bytes,
        reconcile_every_s=settings.engine_health_interval_s,
    )
    return LivePlacement(
        state.registry,
        OpsRouter(LocalOps(state.disk_cache), agent_token=settings.agent_token),
        DbFacts(sessions, state.tenant_limits.get),
        config,
        hints=AliasWatcher(sessions),
    )


@contextlib.asynccontextmanager
async def running(state: Any, settings: Settings, db: SQLAlchemyAsyncConfig) -> AsyncIterator[None]:
    """Build the process's services into `state`, run their background tasks, stop them after."""
    sessions = db.create_session_maker()
    state.settings = settings
    state.authenticator = KeyAuthenticator(sessions)
    state.store = open_object_store(settings)
    try:  # creates the bucket on first start; an outage now is reported by uploads later
        await anyio.to_thread.run_sync(state.store.check)
    except StoreError as exc:
        log.warning("object store not ready at startup: %s", exc)
    # The real Redis, or the process's in-process stand-in when there is no URL (embedded).
    state.redis = open_redis(settings.redis_url, socket_timeout=2)
    state.sign_in_throttle = SignInThrottle(settings.login_attempts_per_minute, settings.redis_url)
    state.registry = EngineRegistry.from_settings(settings, session_factory=sessions)
    state.disk_cache = DiskCache(
        settings.data_dir / "cache", settings.disk_cache_bytes, state.store
    )
    state.usage = UsageRecorder(SqlUsageWriter(sessions))
    state.tenant_limits = TenantLimits(sessions)
    state.placement = live_placement(state, settings, sessions)
    router = EngineRouter(state.registry, state.disk_cache, state.placement)
    # With a URL, Admission makes its own client (short connect timeout, one retry); embedded,
    # it shares the process's stand-in, so the same scripts enforce the same quotas.
    state.admission = Admission(
        settings.redis_url or state.redis,
        lease_s=settings.concurrency_lease_s,
        fail_mode=settings.ratelimit_fail_mode,
        timeout_s=settings.ratelimit_redis_timeout_s,
        overload=AdmissionController(budget_s=settings.admission_ttft_budget_s),
    )
    gate = AdmissionGate(
        state.admission,
        state.admission.overload,
        router,
        settings.admission_parallelism,
        settings.engine_max_in_flight,
        queue_wait_s=settings.engine_queue_wait_s,
        adaptive=settings.engine_adaptive_cap,
        ttft_slo_s=settings.engine_ttft_slo_s,
    )
    lane = PriorityLane(settings.relay_yield_to_new_s, enabled=settings.relay_yield_to_new_s > 0)
    state.gateway = Gateway(
        ModelResolver(sessions), router, state.usage, stream_limits(settings), gate=gate, lane=lane
    )
    state.gateway.resumable = ResumableStreams(
        state.redis, settings.resume_window_s, settings.stream_heartbeat_s
    )
    state.job_queue = JobQueue(make_celery(settings))
    await state.registry.start()
    await state.placement.start()
    usage_task = asyncio.create_task(state.usage.run())
    try:
        yield
    finally:
        await state.placement.stop()
        await state.registry.stop()
        await state.usage.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await usage_task
        await state.admission.aclose()  # closes only a client of its own (the URL's)
        await state.redis.aclose()
