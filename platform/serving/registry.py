"""The engines this process routes to: who they are, whether they answer, what they hold.

Engines come from two places: `LORAPLEX_ENGINES` (fixed for the life of the process) and the
`engines` table (registered through `/api/v1/engines`, re-read periodically so every API
replica converges). A background task probes each one; an engine that stops answering
leaves `candidates()` and comes back when it answers again. An engine its agent registered
also leaves them while the agent is silent, and is deleted once it has been silent long
enough (agent_liveness.py). Its agent is its health prober: the probe here takes the
agent's report instead of calling the engine's health route, and the engine leaves
`candidates()` as soon as the report (or a drain) reaches this process: at once through the
change feed (`sync_now`), else at the next read of the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.agent_token import open_agent_secret
from loraplex.db.models import BaseModel, Engine
from loraplex.serving.agent_liveness import AgentState, agent_state
from loraplex.serving.engines import EngineDriver, EngineLoad, make_driver
from loraplex.serving.engines.facts_check import Claim
from loraplex.serving.health import HealthRule
from loraplex.serving.poller import HealthPoller, SessionFactory
from loraplex.settings import EngineEndpoint, Settings

log = logging.getLogger("loraplex.serving.registry")

DriverFactory = Callable[[str, str], EngineDriver]  # (kind, url) -> driver
# Settings engines have no database row; a stable id derived from the name lets the API and
# the gateway address them like registered ones, across restarts and replicas.
SETTINGS_NAMESPACE = uuid.UUID("5b0c4a53-7c1e-4f43-9b7e-6c1a0e0f6a11")
# An engine no agent reports on gets its health route (on SGLang a one-token generation)
# every this many poll rounds; the rounds between make only the cheap calls.
HEALTH_ROUTE_EVERY_ROUNDS = 5


class EngineSource(enum.StrEnum):
    """Where an engine was declared."""

    DATABASE = "database"  # registered through the API
    SETTINGS = "settings"  # LORAPLEX_ENGINES


@dataclass(eq=False)
class EngineHandle:
    """One engine as the gateway sees it: its facts, its driver and its live state."""

    id: str
    name: str
    url: str
    kind: str
    base_model: str  # the base model's name
    max_lora_rank: int
    gpu_slots: int
    host_slots: int
    driver: EngineDriver
    healthy: bool = False  # unknown until the first probe answers
    in_flight: int = 0  # requests the gateway has sent and not finished
    loaded: set[str] = field(default_factory=set)  # engine-side adapter names
    last_error: str = ""
    # What the engine itself last reported running and queued (its /metrics), or None.
    engine_load: EngineLoad | None = None
    source: EngineSource = EngineSource.DATABASE
    agent_url: str = ""
    agent: AgentState = AgentState.OPERATOR  # STALE keeps it out of rotation
    # The agent's last report of the engine's health; None: this process probes it itself.
    reported_healthy: bool | None = None
    draining: bool = False  # its agent is draining it: no new requests (agent_drain.py)
    probe_failed: bool = False  # its base model's probes gave other answers (probes/)
    reported_at: datetime | None = None  # the heartbeat `reported_healthy` and `draining` came in
    # Engine-side name -> the load in progress, so concurrent requests share one load.
    loading: dict[str, asyncio.Task[Any]] = field(default_factory=dict, repr=False)
    # The kind, base model, rank and slots the engine itself last confirmed (facts_check.py);
    # until it confirms the registered ones, the poller keeps it out of rotation. Forgotten
    # when the engine leaves rotation, so an engine back from a restart is asked again.
    facts_confirmed: Claim | None = None
    facts_mismatch: str = ""  # why the engine's own facts keep it out ("": they do not)
    base_source: str = ""  # where its base model was registered from (a path or URI)
    # The secret its agent registered: sent to that agent instead of the shared agent token
    # (serving/live/ops.py). "": an operator's engine, or an agent from before it existed.
    agent_secret: str = field(default="", repr=False)

    @property
    def claim(self) -> Claim:
        """What the registration says about the engine, as facts_check compares it. An
        engine from LORAPLEX_ENGINES is not held to its base model's name: it has no
        registration to refuse, and its operator may name the pool as they like."""
        base = self.base_model if self.persisted else ""
        return Claim.of(
            self.kind, self.max_lora_rank, self.gpu_slots, self.host_slots,
            base, self.base_source,
        )  # fmt: skip

    @property
    def adapter_slots(self) -> int:
        """GPU slots adapters can count on: on SGLang a base-model request in the batch
        takes one of `--max-loras-per-batch`, so one is kept for it."""
        if getattr(self.driver, "base_takes_a_slot", False) and self.gpu_slots > 1:
            return self.gpu_slots - 1
        return self.gpu_slots

    @property
    def in_rotation(self) -> bool:
        """Whether requests may go to it: it answers, is not draining, and its agent (if
        any) is heard."""
        return (
            self.healthy
            and not self.draining
            and not self.probe_failed
            and self.agent is not AgentState.STALE
        )

    @property
    def persisted(self) -> bool:
        """Whether the engine has a database row to record its health in."""
        return self.source is EngineSource.DATABASE


def settings_engine_id(name: str) -> str:
    """The stable id of an engine listed in settings."""
    return str(uuid.uuid5(SETTINGS_NAMESPACE, name))


def keyed_driver_factory(api_key: str) -> DriverFactory:
    """Drivers that send `api_key` to their engines (plain `make_driver` without one)."""
    if not api_key:
        return make_driver
    return lambda kind, url: make_driver(kind, url, api_key=api_key)


def handle_from_endpoint(endpoint: EngineEndpoint, driver_factory: DriverFactory) -> EngineHandle:
    """A handle for an engine listed in `LORAPLEX_ENGINES`."""
    return EngineHandle(
        id=settings_engine_id(endpoint.name),
        name=endpoint.name,
        url=endpoint.url,
        kind=endpoint.kind,
        base_model=endpoint.base_model,
        max_lora_rank=endpoint.max_lora_rank,
        gpu_slots=endpoint.gpu_slots,
        host_slots=endpoint.host_slots,
        driver=driver_factory(endpoint.kind, endpoint.url),
        source=EngineSource.SETTINGS,
    )


def handle_from_row(
    row: Engine,
    base_model: str,
    driver_factory: DriverFactory,
    base_source: str = "",
    agent_secret: str = "",
) -> EngineHandle:
    """A handle for an engine registered in the database (its base model registered from
    `base_source`; its agent's secret, opened, `agent_secret`)."""
    return EngineHandle(
        id=str(row.id),
        name=row.name,
        url=row.url,
        kind=str(row.kind),
        base_model=base_model,
        max_lora_rank=row.max_lora_rank,
        gpu_slots=row.gpu_slots,
        host_slots=row.host_slots,
        driver=driver_factory(str(row.kind), row.url),
        agent_url=row.agent_url,
        reported_healthy=row.engine_healthy if row.agent_seen_at is not None else None,
        draining=row.draining,
        reported_at=row.agent_seen_at,
        base_source=base_source,
        agent_secret=agent_secret,
    )


class EngineRegistry:
    """The single source of truth for which engines exist and which may take requests."""

    def __init__(
        self,
        *,
        interval_s: float = 2.0,
        session_factory: SessionFactory | None = None,
        driver_factory: DriverFactory = make_driver,
        rule: HealthRule | None = None,
        probe_timeout_s: float = 5.0,
        heartbeat_every_s: float = 30.0,
        db_sync_every_s: float = 30.0,
        agent_stale_after_s: float = 20.0,
        agent_forget_after_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        health_route_every_s: float = 0.0,
        agent_secret_key: str = "",
    ) -> None:
        self.interval_s = interval_s
        self.agent_secret_key = agent_secret_key  # opens agents' secrets (auth/agent_token.py)
        self.session_factory = session_factory
        self.driver_factory = driver_factory
        # Often enough that a silent agent's engine leaves rotation about on time.
        self.db_sync_every_s = min(db_sync_every_s, agent_stale_after_s / 2)
        self.agent_stale_after_s, self.agent_forget_after_s = (
            agent_stale_after_s, agent_forget_after_s,
        )  # fmt: skip
        self.clock, self.wall_clock = clock, wall_clock
        self.poller = HealthPoller(
            rule=rule,
            probe_timeout_s=probe_timeout_s,
            heartbeat_every_s=heartbeat_every_s,
            session_factory=session_factory,
            clock=clock,
            health_route_every_s=health_route_every_s,
        )
        self._engines: dict[str, EngineHandle] = {}
        # What admission holds for an engine, for the engines page (set by the composition
        # root to the gate's `engine_view`; None: this process admits nothing).
        self.admission_view: Callable[[EngineHandle], Any] | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._last_db_sync: float | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        session_factory: SessionFactory | None = None,
        driver_factory: DriverFactory | None = None,
    ) -> EngineRegistry:
        """A registry holding the engines of `LORAPLEX_ENGINES`, polled at the set interval;
        its drivers send `LORAPLEX_ENGINE_API_KEY` unless `driver_factory` says otherwise."""
        driver_factory = driver_factory or keyed_driver_factory(settings.engine_api_key)
        registry = cls(
            interval_s=settings.engine_health_interval_s,
            session_factory=session_factory,
            driver_factory=driver_factory,
            agent_stale_after_s=settings.agent_stale_after_s,
            agent_forget_after_s=settings.agent_forget_after_s,
            health_route_every_s=settings.engine_health_interval_s * HEALTH_ROUTE_EVERY_ROUNDS,
            agent_secret_key=settings.secret_key,
        )
        for endpoint in settings.engines:
            registry.add(handle_from_endpoint(endpoint, driver_factory))
        return registry

    def add(self, handle: EngineHandle) -> None:
        """Add (or replace) an engine; it joins the rotation once a probe answers."""
        self._engines[handle.id] = handle
        if self._loop_task is not None:  # running: probe now rather than at the next round
            self._spawn(self.poller.probe(handle))

    def remove(self, engine_id: str) -> EngineHandle | None:
        """Take an engine out of the registry; the caller closes its driver (see `retire`)."""
        self.poller.forget(engine_id)
        return self._engines.pop(engine_id, None)

    async def retire(self, engine_id: str) -> None:
        """Remove an engine and close its driver (its streams in flight end with an error)."""
        handle = self.remove(engine_id)
        if handle is not None:
            await _close_quietly(handle)

    def get(self, engine_id: str) -> EngineHandle | None:
        """The engine with this id, if registered."""
        return self._engines.get(engine_id)

    def all(self) -> list[EngineHandle]:
        """Every engine, healthy or not, by name."""
        return sorted(self._engines.values(), key=lambda h: h.name)

    def candidates(self, base_model: str) -> list[EngineHandle]:
        """Healthy engines serving `base_model` (by name): the ones a request may go to."""
        return [h for h in self.all() if h.in_rotation and h.base_model == base_model]

    async def mark_unhealthy(self, engine_id: str, reason: str) -> None:
        """Take an engine out of rotation now (it failed a request); the poller brings it back."""
        handle = self._engines.get(engine_id)
        if handle is not None:
            await self.poller.force_down(handle, reason)

    def sync_now(self) -> None:
        """Re-read the engines table now (another process heard an engine drain or fail)."""
        self._last_db_sync = None
        self._spawn(self._sync_from_db_if_due())

    async def poll_once(self) -> None:
        """One round of probes over every engine."""
        await self.poller.poll(list(self._engines.values()))

    async def refresh_from_db(self, session: AsyncSession) -> None:
        """Make the database-registered engines match the `engines` table; delete the rows
        of engines whose agent has been silent past `agent_forget_after_s`."""
        rows = (
            await session.execute(
                select(Engine, BaseModel.name, BaseModel.source).join(
                    BaseModel, Engine.base_model_id == BaseModel.id
                )
            )
        ).all()
        now = self.wall_clock()
        seen: set[str] = set()
        lost = []
        for row, base_model, base_source in rows:
            state = agent_state(
                row.agent_seen_at, now, self.agent_stale_after_s, self.agent_forget_after_s
            )
            if state is AgentState.LOST:
                lost.append(row.id)
                continue
            seen.add(str(row.id))
            await self.adopt(row, base_model, base_source)
            self._engines[str(row.id)].agent = state
        if lost:  # any replica may do it; deleting a deleted row deletes nothing
            log.warning("forgetting %d engine(s) whose agent went silent", len(lost))
            await session.execute(delete(Engine).where(Engine.id.in_(lost)))
            await session.commit()
        for handle in list(self._engines.values()):
            if handle.persisted and handle.id not in seen:
                await self.retire(handle.id)
        self._last_db_sync = self.clock()

    async def start(self) -> None:
        """Read the database, probe every engine once, then keep probing in the background."""
        if self._loop_task is not None:
            return
        await self._sync_from_db_if_due()
        await self.poll_once()  # so the first request already sees who answers
        self._loop_task = asyncio.create_task(self._run(), name="engine-health-poller")

    async def stop(self) -> None:
        """Stop probing and close every driver."""
        tasks = [t for t in (self._loop_task, *self._side_tasks) if t is not None]
        self._loop_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for handle in list(self._engines.values()):
            await _close_quietly(handle)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._sync_from_db_if_due()
            await self.poll_once()

    async def _sync_from_db_if_due(self) -> None:
        """Re-read the engines table every `db_sync_every_s` (other replicas may change it)."""
        if self.session_factory is None:
            return
        if self._last_db_sync is not None and (
            self.clock() - self._last_db_sync < self.db_sync_every_s
        ):
            return
        try:
            async with self.session_factory() as session:
                await self.refresh_from_db(session)
        except Exception as exc:  # keep serving the engines we know about
            log.warning("could not read the engines table: %s", exc)
            self._last_db_sync = self.clock()

    async def adopt(self, row: Engine, base_model: str, base_source: str = "") -> None:
        """Keep a known engine's live state; rebuild its handle only if its address changed."""
        current = self._engines.get(str(row.id))
        secret = open_agent_secret(self.agent_secret_key, row.name, row.agent_secret_sealed)
        if current is not None and (current.url, current.kind) == (row.url, str(row.kind)):
            current.name, current.base_model = row.name, base_model
            current.base_source = base_source
            current.max_lora_rank, current.agent_url = row.max_lora_rank, row.agent_url
            current.gpu_slots, current.host_slots = row.gpu_slots, row.host_slots
            self._take_report(current, row, secret)
            return
        if current is not None:
            await self.retire(current.id)
        self.add(handle_from_row(row, base_model, self.driver_factory, base_source, secret))

    def _take_report(self, handle: EngineHandle, row: Engine, agent_secret: str) -> None:
        """Adopt the agent's report of its engine's health and drain, and its secret; a
        change acts now."""
        seen = row.agent_seen_at
        if seen is not None and handle.reported_at is not None and seen < handle.reported_at:
            # A read of the table that began before the heartbeat this process just took
            # committed: its older report must not undo the newer one.
            return
        handle.reported_at, handle.draining = seen, row.draining
        handle.agent_secret = agent_secret
        reported = row.engine_healthy if seen is not None else None
        before, handle.reported_healthy = handle.reported_healthy, reported
        if reported is False and before is not False:
            # Out now; the tracker and the row follow in a task of their own: this may run
            # inside the transaction that holds the engine's row (a heartbeat's), which the
            # poller's own write would wait for.
            handle.healthy = False
            self._spawn(self.poller.force_down(handle, "its agent reports the engine down"))
        elif reported and before is not True and not handle.healthy:
            self._spawn(self.poller.probe(handle))  # back in rotation without a round's wait

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._side_tasks.add(task)  # a reference, or the task may be collected mid-flight
        task.add_done_callback(self._side_tasks.discard)


async def _close_quietly(handle: EngineHandle) -> None:
    try:
        await handle.driver.aclose()
    except Exception as exc:  # closing a client to a dead engine may fail; nothing to do
        log.debug("closing driver of %s: %s", handle.name, exc)
