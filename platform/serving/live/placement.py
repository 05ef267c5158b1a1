"""LivePlacement: the policy core deciding, the gateway's engines doing.

For each request for an adapter version, `acquire` asks the core where to run it
(`route`), carries out the loads and evictions it returns through the node's ops, and waits
until the core releases the request to the engine (`dispatch`: active adapter first,
weighted fair share, bounded wait; at most `gpu_slots x running_per_gpu_slot` in flight per
engine). The seat it returns must be released when the engine request ends; that tells the
core (`request_finished`), which protects the adapter from eviction until then.

A background loop keeps the core in step with the engines: engines joining and leaving
rotation (a draining engine first hands its pinned and hot adapters to the others,
`evacuate`; while its rank class is empty, larger classes serve its adapters), and what each
engine reports loaded (`reconcile`: an engine restart, SGLang's own LRU evictions and its
silent re-loads). Alias moves seen by the `AliasWatcher` prefetch the
new version where the old one is loaded (`promote`); versions the `UploadWatcher` sees
become ready are fetched onto an engine of their rank class, into its memory where a slot
is free (`warm`), so their first request does not wait for a download. Every few seconds
the loop also reads which versions pinned aliases point at and pins them, unpinning what
no alias holds any more (`sync_pins`, pins.py), so a pin follows its alias and every
replica pins the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from uuid import UUID

from loraplex.errors import NotFound
from loraplex.observability import metrics
from loraplex.serving.engines import EngineDied, EngineUnavailable
from loraplex.serving.live.adapter_figures import AdapterFigures
from loraplex.serving.live.errors import ColdLoadLimited, PlacementDeferred
from loraplex.serving.live.facts import FactsSource, VersionFacts
from loraplex.serving.live.hints import AliasWatcher, UploadWatcher
from loraplex.serving.live.load_times import LoadTime
from loraplex.serving.live.ops import OpsRouter
from loraplex.serving.live.pins import PinChanges, Pins
from loraplex.serving.live.pool import Pool, SlotClaim
from loraplex.serving.live.runner import ActionRunner
from loraplex.serving.live.view import VersionTiers, snapshot, tiers_of
from loraplex.serving.loader import engine_adapter_name, version_id_from_engine_name
from loraplex.serving.policy import (
    TIER_COSTS,
    Deferred,
    Dispatch,
    NodeSpec,
    PolicyConfig,
    Rejected,
    Request,
    TenantPlan,
    Tier,
    TierCosts,
)
from loraplex.serving.registry import EngineHandle, EngineRegistry

log = logging.getLogger("loraplex.serving.live")
RE_ROUTE = (EngineUnavailable, EngineDied)  # the engine failed a load: try another one


class LoadWatcher(Protocol):
    """Told of promotions and finished engine loads (the correctness probes)."""

    def promoted(self, version_id: UUID) -> None:
        """An alias moved to the version."""
        ...

    def loaded(self, handle: EngineHandle, version_id: UUID) -> None:
        """The version finished loading on the engine."""
        ...


@dataclass(frozen=True)
class LiveConfig:
    """How live placement runs; `policy.plans` is filled from the tenants' plans."""

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    costs: TierCosts = TIER_COSTS
    queue_timeout_s: float = 30.0
    running_per_gpu_slot: int = 2  # engine queue bound: in flight per GPU slot
    disk_budget_bytes: int = 10 * 2**30
    reconcile_every_s: float = 2.0
    pin_sync_every_s: float = 5.0  # how often pinned aliases are read from the database
    # An engine's adapter list may have been read before one of our unloads finished;
    # for this long a just-unloaded name in a report is taken as stale, not as a re-load.
    unload_grace_s: float = 10.0


@dataclass
class Seat:
    """An engine slot for one request; call `release` once the engine request has ended."""

    engine: EngineHandle
    adapter_name: str
    tier: Tier  # where the adapter was when the request arrived
    waited_s: float  # queue and load time before the release to the engine
    release: Callable[[], None]


class LivePlacement:
    """One policy core per base model, fed from the engine registry and the database."""

    def __init__(
        self,
        registry: EngineRegistry,
        ops: OpsRouter,
        facts: FactsSource,
        config: LiveConfig | None = None,
        hints: AliasWatcher | None = None,
        uploads: UploadWatcher | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry, self.ops, self.facts = registry, ops, facts
        # The cores decide what leaves this process's disk cache; it only carries that out.
        ops.local.cache.follow_policy()
        self.config = config = config or LiveConfig()
        self.hints = hints
        self.uploads = uploads
        self.clock = clock
        self.plans: dict[str, TenantPlan] = {}
        self.policy = replace(config.policy, plans=self.plans)  # the dict stays live
        self.pools: dict[str, Pool] = {}
        self.pins = Pins()
        self.versions: dict[str, VersionFacts] = {}
        self.runner = ActionRunner(self)
        self._ids = itertools.count(1)
        self._loop: asyncio.Task[None] | None = None
        # Per engine, what it held at the last report that was not empty, and
        # the engines whose agent reported a restart not yet restored (engine_restarted).
        self._resident: dict[str, set[str]] = {}
        self._restarted: set[str] = set()
        self._evacuated: set[str] = set()  # draining engines whose adapters were re-placed
        # Engine -> versions it must not serve (its probes failed): kept here so a pool made
        # later, or an engine rejoining the core, is barred as well.
        self.barred: dict[str, set[str]] = {}
        self.watcher: LoadWatcher | None = None  # set by whoever watches loads (the prober)
        self.figures = AdapterFigures()  # per-adapter TTFT and loads (the engines page)

    # --- requests -----------------------------------------------------------------------

    async def acquire(self, base_model: str, version_id: UUID) -> Seat | None:
        """Wait for an engine slot with the version loaded; None when no engine can serve it.

        Raises ColdLoadLimited (429) or PlacementDeferred (503) when the tenant's cold-load
        budget holds the request back, and the load's error when loading failed.
        """
        facts = await self._know(version_id)
        if facts is None:
            return None
        self.plans[str(facts.tenant_id)] = await self.facts.plan(facts.tenant_id)
        started = self.clock()
        request_id = next(self._ids)
        while True:
            pool = self.pool(base_model)
            if not pool.fits(facts.rank):
                return None
            self._register(pool, facts)
            if not pool.core.cluster.servable(facts.for_policy()):
                return None  # every engine that fits is barred from this version
            now = self.clock()
            request = Request(request_id, str(facts.tenant_id), str(version_id), now)
            outcome = pool.core.route(request, now)
            if isinstance(outcome, Rejected):
                raise ColdLoadLimited(outcome.retry_after_s)
            if isinstance(outcome, Deferred):
                await self._wait_deferred(outcome, started)
                continue  # same request id: the core holds its ticket
            claim = SlotClaim(
                request, outcome.node_id, pool.epoch(outcome.node_id) or 0, outcome.found, now
            )
            pool.claims[request_id] = claim
            self.runner.apply(pool, outcome.actions)
            self.dispatch(pool, outcome.node_id)
            dispatch = await self._await_dispatch(pool, claim)
            if dispatch is None:
                request_id = next(self._ids)  # its engine left: route afresh
                continue
            return self._seat(pool, claim)

    async def _await_dispatch(self, pool: Pool, claim: SlotClaim) -> Dispatch | None:
        try:
            return await claim.future
        except asyncio.CancelledError:
            if claim.running:  # released just as the caller gave up
                self._release(pool, claim)
            else:
                claim.abandoned = True  # finished at once when dispatched (dispatch())
            raise
        except RE_ROUTE as exc:
            await self.registry.mark_unhealthy(claim.node_id, f"adapter load failed: {exc}")
            return None

    async def _wait_deferred(self, deferred: Deferred, started: float) -> None:
        now = self.clock()
        if deferred.until > started + self.config.queue_timeout_s:
            raise PlacementDeferred(deferred.until - now)
        await asyncio.sleep(max(0.0, deferred.until - now))

    def _seat(self, pool: Pool, claim: SlotClaim) -> Seat:
        handle = pool.handle(claim.node_id)
        assert handle is not None  # a running claim's engine only leaves after it ran
        name = engine_adapter_name(UUID(claim.request.version_id))
        return Seat(
            handle,
            name,
            claim.found,
            self.clock() - claim.routed_at,
            lambda: self._release(pool, claim),
        )

    def _release(self, pool: Pool, claim: SlotClaim) -> None:
        if claim.released:
            return
        claim.released = True
        pool.claims.pop(claim.request.request_id, None)
        if not pool.current(claim):
            return  # that engine incarnation left the core with its state
        actions = pool.core.request_finished(claim.node_id, claim.request, self.clock())
        self.runner.apply(pool, actions)
        self.dispatch(pool, claim.node_id)

    def dispatch(self, pool: Pool, node_id: str) -> None:
        """Release what the core lets run on the engine now, waking each request's caller."""
        while node_id in pool.nodes:
            batch = pool.core.dispatch(node_id, self.clock())
            if not batch:
                self._publish_waiting(pool, node_id)
                return
            for released in batch:
                claim = pool.claims.get(released.request.request_id)
                if claim is None:
                    continue
                claim.running = True
                if released.swapped_in:  # the engine's own slot swap, as the core models it
                    metrics.count_adapter_loads("loaded", "active")
                if claim.abandoned or claim.future.done():
                    self._release(pool, claim)  # nobody waits for it: give the room back
                else:
                    claim.future.set_result(released)

    def _publish_waiting(self, pool: Pool, node_id: str) -> None:
        """How many adapters wait on the engine, for a load or a GPU slot (/metrics)."""
        node = pool.core.cluster.nodes[node_id]
        name = pool.nodes[node_id].handle.name
        metrics.ADAPTERS_WAITING.labels(name, "load").set(len(node.waiting))
        slot = len(node.queue.waiting_for_slot())
        metrics.ADAPTERS_WAITING.labels(name, "gpu_slot").set(slot)

    def first_token(self, version_id: UUID, ttft_s: float) -> None:
        """A request for the version got its first token (its adapter's TTFT figures)."""
        self.figures.first_token(str(version_id), ttft_s)

    def forget(self, engine_id: str, version_id: UUID) -> None:
        """The engine said it lacks the adapter: drop it from the core's view of that engine."""
        for pool in self.pools.values():
            if engine_id in pool.nodes:
                handle = pool.nodes[engine_id].handle
                handle.loaded.discard(engine_adapter_name(version_id))
                self.reconcile(pool, engine_id)

    def bar(self, engine_id: str, version_id: UUID) -> None:
        """Send no more requests for the version to the engine (its probes failed)."""
        self.barred.setdefault(engine_id, set()).add(str(version_id))
        for pool in self.pools.values():
            pool.core.cluster.barred.setdefault(str(version_id), set()).add(engine_id)

    def unbar(self, engine_id: str, version_id: UUID) -> None:
        """The engine may serve the version again (its probes pass)."""
        self.barred.get(engine_id, set()).discard(str(version_id))
        for pool in self.pools.values():
            pool.core.cluster.barred.get(str(version_id), set()).discard(engine_id)

    def loaded(self, handle: EngineHandle, version_id: UUID) -> None:
        """An engine load of the version finished: tell the watcher."""
        if self.watcher is not None:
            self.watcher.loaded(handle, version_id)

    # --- the core's inputs ----------------------------------------------------------------

    def pool(self, base_model: str) -> Pool:
        """The base model's pool, synced with the engines in rotation."""
        pool = self.pools.get(base_model)
        if pool is None:
            pool = self.pools[base_model] = Pool(
                base_model, self.policy, self.config.costs, self.node_spec
            )
            for engine_id, versions in self.barred.items():
                for key in versions:
                    pool.core.cluster.barred.setdefault(key, set()).add(engine_id)
        self._evacuate_draining(pool)
        for handle in pool.sync(self.registry.candidates(base_model)):
            self.reconcile(pool, handle.id)  # adopt what a joining engine already holds
            if handle.id in self._restarted:
                self._restore(pool, handle.id)
        return pool

    def _evacuate_draining(self, pool: Pool) -> None:
        """Before a draining engine leaves the core, load its pinned and hot adapters on
        the engines that stay, so its traffic finds them there."""
        for node_id, node in list(pool.nodes.items()):
            if not node.handle.draining:
                self._evacuated.discard(node_id)
                continue
            if node_id in self._evacuated:
                continue
            self._evacuated.add(node_id)
            actions = pool.core.evacuate(node_id, self.clock())
            log.warning("engine %s is draining: re-placing %d adapter load(s)",
                        node.handle.name, len(actions))  # fmt: skip
            for action in actions:
                self.runner.apply(pool, [action])

    def node_spec(self, handle: EngineHandle) -> NodeSpec:
        """The core's view of an engine's capacities."""
        return NodeSpec(
            node_id=handle.id,
            max_lora_rank=handle.max_lora_rank,
            gpu_slots=handle.adapter_slots,
            host_slots=handle.host_slots,
            disk_budget_bytes=self.config.disk_budget_bytes,
            max_running=max(1, handle.gpu_slots * self.config.running_per_gpu_slot),
        )

    async def _know(self, version_id: UUID) -> VersionFacts | None:
        facts = self.versions.get(str(version_id))
        if facts is None:
            facts = await self.facts.version(version_id)
            if facts is not None:
                self.versions[str(version_id)] = facts
        return facts

    def _register(self, pool: Pool, facts: VersionFacts) -> None:
        key = str(facts.version_id)
        if key not in pool.core.cluster.versions:
            pool.core.cluster.add_version(facts.for_policy())
            if key in self.pins:  # held to the plan by pin() or the control plane
                pool.core.pin(key, within_plan=False)

    def reconcile(self, pool: Pool, node_id: str) -> None:
        """Align the core with what the engine reports loaded (via the health poller)."""
        handle = pool.handle(node_id)
        if handle is None:
            return
        reported = {
            str(v) for v in map(version_id_from_engine_name, handle.loaded) if v is not None
        }
        reported -= self.runner.recently_unloaded(node_id)
        for key in reported - pool.core.cluster.versions.keys():
            if key in self.versions:
                self._register(pool, self.versions[key])
        node = pool.core.cluster.nodes[node_id]
        actions = pool.core.reconcile(node_id, reported, self.clock())
        if node.host:  # an empty report (a restart, a rejoin) keeps what it held before
            self._resident[node_id] = set(node.host)
        ops = self.ops.for_engine(handle)
        ops.held(handle, [UUID(v) for v in node.host if v not in node.pending])
        self.runner.apply(pool, actions)
        self.dispatch(pool, node_id)

    async def engine_restarted(self, engine_id: str) -> None:
        """The engine's agent saw it restart: load again what it held, pinned versions
        first; now if it is in rotation, else as soon as it rejoins."""
        self._restarted.add(engine_id)
        for pool in list(self.pools.values()):
            handle = pool.handle(engine_id)
            if handle is None:
                continue
            handle.loaded = await handle.driver.list_loaded()  # the poller's view may predate it
            self.reconcile(pool, engine_id)
            self._restore(pool, engine_id)

    def _restore(self, pool: Pool, node_id: str) -> None:
        self._restarted.discard(node_id)
        held = self._resident.get(node_id, set())
        actions = pool.core.restore(node_id, held, self.clock())
        log.info("engine %s restarted: restoring %d adapter load(s)", node_id, len(actions))
        self.runner.apply(pool, actions)
        self.dispatch(pool, node_id)

    async def reconcile_all(self) -> None:
        """One round: sync every pool with rotation, reconcile every engine, learn new names.

        Then, at most every `pin_sync_every_s`, follow the pinned aliases (`sync_pins`).
        """
        for pool in list(self.pools.values()):
            self.pool(pool.base_model)
            for node_id in list(pool.nodes):
                await self._learn(pool, node_id)
                self.reconcile(pool, node_id)
        if self.pins.aliases_due(self.clock(), self.config.pin_sync_every_s):
            await self.sync_pins()

    async def sync_pins(self) -> None:
        """Pin what pinned aliases point at now (target and canary); unpin what they left."""
        versions = await self.facts.pinned_versions()
        changes = self.pins.follow_aliases(frozenset(map(str, versions)), self.clock())
        for key in changes.pinned:
            await self._know(UUID(key))  # so an engine reporting it loaded registers it pinned
        self._apply_pins(changes)

    def _apply_pins(self, changes: PinChanges) -> None:
        for pool in self.pools.values():
            for key in changes.pinned & pool.core.cluster.versions.keys():
                pool.core.pin(key, within_plan=False)
            for key in changes.unpinned:
                pool.core.unpin(key)

    async def _learn(self, pool: Pool, node_id: str) -> None:
        """Read facts of versions an engine holds that this process has not seen (restart)."""
        handle = pool.handle(node_id)
        for version_id in filter(
            None, map(version_id_from_engine_name, list(handle.loaded if handle else ()))
        ):
            if str(version_id) not in self.versions:
                await self._know(version_id)

    # --- operator actions -------------------------------------------------------------------

    async def promote(self, old: UUID, new: UUID) -> None:
        """Prefetch `new` onto the engines where `old` is loaded (an alias or canary moved)."""
        facts = await self._know(new)
        if facts is None:
            return
        for pool in self.pools.values():
            if str(old) not in pool.core.cluster.versions:
                continue
            self._register(pool, facts)
            for action in pool.core.promote(str(old), str(new), self.clock()):
                self.runner.apply(pool, [action])

    async def warm(self, base_model: str, version_id: UUID) -> None:
        """A version became ready: fetch it where its first request will go (core.warm)."""
        facts = await self._know(version_id)
        if facts is None:
            return
        pool = self.pool(base_model)
        if not pool.nodes or not pool.fits(facts.rank):
            return
        self._register(pool, facts)
        for action in pool.core.warm(str(version_id), self.clock()):
            self.runner.apply(pool, [action])

    async def pin(self, version_id: UUID) -> bool:
        """Operator pin of a version (never evicted); False when the plan allows no more.

        Operator pins live in this process (not the database): they hold until unpinned or
        restart. Tenants pin aliases instead, in the database (`sync_pins`).
        """
        facts = await self._know(version_id)
        if facts is None:
            raise NotFound("adapter version not found")
        plan = self.plans[str(facts.tenant_id)] = await self.facts.plan(facts.tenant_id)
        key = str(version_id)
        operator = self.pins.by_operator
        mine = [v for v in operator if self.versions[v].tenant_id == facts.tenant_id]
        if key not in operator and len(mine) >= plan.max_pins:
            return False
        operator.add(key)
        self._apply_pins(PinChanges(pinned=frozenset({key}), unpinned=frozenset()))
        return True

    def unpin(self, version_id: UUID) -> None:
        """Drop an operator pin; the version stays pinned while a pinned alias points at it."""
        key = str(version_id)
        self.pins.by_operator.discard(key)
        if key not in self.pins:
            self._apply_pins(PinChanges(pinned=frozenset(), unpinned=frozenset({key})))

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Run the reconcile (and alias watch) loop in the background."""
        if self._loop is None:
            self._loop = asyncio.create_task(self._run(), name="live-placement")

    async def stop(self) -> None:
        """Stop the loop, wait for actions in progress, close agent clients."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None
        await self.runner.drain()
        await self.ops.aclose()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.reconcile_every_s)
            try:
                await self.reconcile_all()
                if self.hints is not None:
                    moves = await self.hints.moves()
                    if moves:  # a moved pinned alias: move its pin before promote makes room
                        await self.sync_pins()
                    for old, new in moves:
                        await self.promote(old, new)
                    for version_id in self.hints.take_promoted():
                        if self.watcher is not None:
                            self.watcher.promoted(version_id)
                if self.uploads is not None:
                    for base_model, version_id in await self.uploads.ready():
                        await self.warm(base_model, version_id)
            except Exception:  # the loop must outlive one bad round
                log.exception("placement reconcile round failed")

    def recent_loads(self, version_id: UUID) -> list[LoadTime]:
        """The version's last few engine loads in this process, newest first (the console)."""
        return self.runner.load_times.of(str(version_id))

    def engines_for(self, base_model: str) -> dict[str, str]:
        """Engine id -> name of every engine serving `base_model`: those in rotation now and
        those its pool still holds (the console lists them even before they place anything)."""
        pool = self.pools.get(base_model)
        engines = {node_id: n.handle.name for node_id, n in pool.nodes.items()} if pool else {}
        engines.update((h.id, h.name) for h in self.registry.candidates(base_model))
        return engines

    def tiers_of(self, version_ids: Iterable[str]) -> dict[str, VersionTiers]:
        """Where each of `version_ids` is now (those placed at all): cheap enough to poll."""
        return tiers_of(self, version_ids)

    def snapshot(self) -> dict[str, Any]:
        """The placement map for the operator API (see control/engines/placement.py)."""
        return snapshot(self)
