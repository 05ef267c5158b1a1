"""The discrete-event loop: a heap of timed events driving the same PolicyCore as the gateway."""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loraplex.serving.policy import (
    TIER_COSTS,
    TO_DISK,
    TO_GPU,
    TO_HOST,
    Deferred,
    Dispatch,
    Evict,
    Load,
    NodeSpec,
    PolicyConfig,
    PolicyCore,
    Rejected,
    Request,
    Tier,
)
from loraplex.serving.policy.actions import Action
from loraplex.serving.simulator import costs
from loraplex.serving.simulator.bound import min_cold_loads
from loraplex.serving.simulator.metrics import RunMetrics, summarize
from loraplex.serving.simulator.workload import Workload

_LOAD_DONE, _FINISH, _RETRY, _UPLOAD = 0, 1, 2, 3
_SAMPLE_EVERY = 997  # requests between samples of resident adapters


class FutureTrace:
    """Belady's oracle: when each adapter is next requested after the current time."""

    def __init__(self, workload: Workload) -> None:
        order = np.argsort(workload.adapter, kind="stable")
        sorted_adapters = workload.adapter[order]
        bounds = np.searchsorted(sorted_adapters, np.arange(len(workload.adapters) + 1))
        times = workload.arrival[order]
        self._times = {
            a.version_id: times[bounds[i] : bounds[i + 1]] for i, a in enumerate(workload.adapters)
        }
        self.now = 0.0

    def next_use(self, version: str) -> float:
        """Arrival time of the next request for `version`; infinity when none is left."""
        times = self._times[version]
        index = int(np.searchsorted(times, self.now, side="right"))
        return float(times[index]) if index < len(times) else float("inf")


@dataclass(frozen=True, slots=True)
class Gating:
    """What happens before the core routes a request (the live gateway's side of it).

    `places`: requests the cluster takes at once (admission's places); later arrivals wait
    in arrival order and are routed as places free, while `PolicyCore.prefetch` may load
    their adapters (`load_on_arrival`). `upload_lead_s`: each adapter version is uploaded
    this long before its first request, and `PolicyCore.warm` may fetch it then
    (`warm_on_upload`). None: no gate, no uploads (every other scenario).
    `loaded_everywhere`: at time 0 every engine loads every version its rank and host slots
    allow (`PolicyCore.restore`), as an SGLang engine started with all of them does.
    """

    places: int | None = None
    upload_lead_s: float | None = None
    loaded_everywhere: bool = False


class Simulator:
    """Replays one workload against one policy configuration."""

    def __init__(
        self,
        workload: Workload,
        nodes: Sequence[NodeSpec],
        config: PolicyConfig,
        gating: Gating | None = None,
    ) -> None:
        self.workload = workload
        self.gating = gating or Gating()
        self._gate: deque[Request] = deque()  # arrived, waiting for a place
        self._admitted = 0
        self.nodes = list(nodes)
        self.oracle = FutureTrace(workload) if config.eviction == "belady" else None
        next_use = self.oracle.next_use if self.oracle else None
        self.core = PolicyCore(self.nodes, workload.adapters, TIER_COSTS, config, next_use)
        self.metrics = RunMetrics(len(workload))
        self._events: list[tuple[float, int, int, Any, Any]] = []
        self._seq = itertools.count()
        self._versions = [a.version_id for a in workload.adapters]
        self._tenants = [a.tenant_id for a in workload.adapters]
        self._deferred: set[int] = set()

    def run(self) -> RunMetrics:
        """Process every arrival and every event it causes."""
        w = self.workload
        arrival = w.arrival.tolist()
        adapter = w.adapter.tolist()
        cost = (w.prompt + w.output).tolist()
        events = self._events
        total = len(arrival)
        i = 0
        now = 0.0
        self._schedule_uploads()
        if self.gating.loaded_everywhere:
            for node in self.nodes:
                self._apply(self.core.restore(node.node_id, self._versions, 0.0), 0.0)
        while i < total or events:
            if events and (i >= total or events[0][0] <= arrival[i]):
                now, _, kind, a, b = heapq.heappop(events)
                self._handle(kind, a, b, now)
                continue
            now = arrival[i]
            index = adapter[i]
            request = Request(i, self._tenants[index], self._versions[index], now, float(cost[i]))
            self._arrive(request, now)
            i += 1
            if i % _SAMPLE_EVERY == 0:
                self._sample()
        self.metrics.end_time = now
        self.metrics.deferred = len(self._deferred)
        return self.metrics

    def _push(self, at: float, kind: int, a: Any, b: Any) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, a, b))

    def _schedule_uploads(self) -> None:
        lead = self.gating.upload_lead_s
        if lead is None:
            return
        firsts, at = np.unique(self.workload.adapter, return_index=True)
        for index, first in zip(firsts.tolist(), at.tolist(), strict=True):
            uploaded = max(0.0, float(self.workload.arrival[first]) - lead)
            self._push(uploaded, _UPLOAD, self._versions[index], None)

    def _arrive(self, request: Request, now: float) -> None:
        if self.oracle is not None:
            self.oracle.now = now
        places = self.gating.places
        if places is None or (self._admitted < places and not self._gate):
            self._admit(request, now)
            return
        self._gate.append(request)
        self._apply(self.core.prefetch(request, now), now)

    def _admit(self, request: Request, now: float) -> None:
        self._admitted += 1
        self._route(request, now)

    def _left(self, now: float) -> None:
        """A request left the cluster (finished or refused): its place goes to the next."""
        self._admitted -= 1
        if self._gate and (self.gating.places is None or self._admitted < self.gating.places):
            self._admit(self._gate.popleft(), now)

    def _route(self, request: Request, now: float) -> None:
        if self.oracle is not None:
            self.oracle.now = now
        routed = self.core.route(request, now)
        if isinstance(routed, Deferred):
            self._deferred.add(request.request_id)
            self._push(routed.until, _RETRY, request, None)
            return
        if isinstance(routed, Rejected):
            self.metrics.rejected += 1  # its TTFT stays NaN: not served
            self._left(now)
            return
        self.metrics.found[request.request_id] = routed.found
        self._apply(routed.actions, now)
        self._dispatch(routed.node_id, now)

    def _handle(self, kind: int, a: Any, b: Any, now: float) -> None:
        if kind == _FINISH:
            self._apply(self.core.request_finished(a, b, now), now)
            self._dispatch(a, now)
            self._left(now)
        elif kind == _LOAD_DONE:
            node_id, version, tier = a
            self._apply(self.core.load_finished(node_id, version, tier, now), now)
            self._dispatch(node_id, now)
        elif kind == _UPLOAD:
            self._apply(self.core.warm(a, now), now)
        else:
            self._route(a, now)  # a deferred request's retry: it holds its place

    def _apply(self, actions: Sequence[Action], now: float) -> None:
        for action in actions:
            if isinstance(action, Load):
                self.metrics.loads[action.tier] += 1
                if action.tier is Tier.DISK:
                    tenant = self.core.cluster.versions[action.version_id].tenant_id
                    by_tenant = self.metrics.cold_loads_by_tenant
                    by_tenant[tenant] = by_tenant.get(tenant, 0) + 1
                load_cost = TO_HOST if action.tier is Tier.LOADED else TO_DISK
                done = now + load_cost.seconds(action.size_bytes)
                self._push(done, _LOAD_DONE, (action.node_id, action.version_id, action.tier), None)
            elif isinstance(action, Evict):
                self.metrics.evictions += 1

    def _dispatch(self, node_id: str, now: float) -> None:
        for d in self.core.dispatch(node_id, now):
            self._start(d, now)

    def _start(self, d: Dispatch, now: float) -> None:
        request = d.request
        rid = request.request_id
        first_token = now + costs.prefill_seconds(int(self.workload.prompt[rid]))
        if d.swapped_in:
            self.metrics.gpu_swaps += 1
            size = self.core.cluster.versions[request.version_id].size_bytes
            first_token += TO_GPU.seconds(size)
        self.metrics.ttft[rid] = first_token - request.arrival
        done = first_token + costs.decode_seconds(int(self.workload.output[rid]))
        self._push(done, _FINISH, d.node_id, request)

    def _sample(self) -> None:
        self.metrics.resident_samples.append(
            sum(node.gpu.num_occupied() for node in self.core.cluster.nodes.values())
        )


def simulate(
    name: str,
    workload: Workload,
    nodes: Sequence[NodeSpec],
    config: PolicyConfig,
    gating: Gating | None = None,
) -> dict[str, Any]:
    """Run one policy over one workload; returns its summary row, with the cold loads no
    policy can go below on the same trace and cluster (bound.py) and its cold loads over it."""
    started = time.perf_counter()
    metrics = Simulator(workload, nodes, config, gating).run()
    wall = time.perf_counter() - started
    tenant_of = np.array([a.tenant_id for a in workload.adapters])
    slot_bytes = sum(n.gpu_slots * n.slot_bytes(costs.BYTES_PER_RANK) for n in nodes)
    row = summarize(name, metrics, tenant_of[workload.adapter], slot_bytes, wall)
    bound = min_cold_loads(workload, nodes)
    if gating is not None:  # what loading ahead changes: each adapter's first request
        firsts = np.unique(workload.adapter, return_index=True)[1]
        first = metrics.ttft[firsts][~np.isnan(metrics.ttft[firsts])]
        row["first_ttft_p50_s"] = float(np.percentile(first, 50)) if len(first) else 0.0
        row["first_ttft_p99_s"] = float(np.percentile(first, 99)) if len(first) else 0.0
    row["cold_load_bound"] = bound
    row["x_bound"] = row["cold_loads"] / bound if bound else 1.0
    return row
