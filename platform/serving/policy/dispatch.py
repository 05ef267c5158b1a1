"""Per-engine release order: active adapters first, weighted fair share, bounded wait."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from .model import Request, TenantId, VersionId

Weight = Callable[[TenantId], float]
_HeapItem = tuple[float, int, VersionId]


@dataclass(slots=True)
class _Queued:
    request: Request
    tag: float  # start tag in the tenant's virtual time (start-time fair queueing)
    entered: float
    released: bool = False


@dataclass(slots=True)
class _VersionQueue:
    items: deque[_Queued] = field(default_factory=deque)
    active: bool = False


class DispatchQueue:
    """Requests whose adapter is in engine memory, waiting for the engine.

    Fair share is start-time fair queueing: each tenant's request gets a start tag
    max(V, tenant's last finish tag) and advances the tenant by cost / weight; the lowest tag
    goes first, so backlogged tenants are served in proportion to weight within one request's
    cost. An adapter belongs to one tenant, so one FIFO per adapter is already in tag order,
    and a heap over adapter heads gives O(log n) selection. Active adapters (holding a GPU
    slot) go before ones that need a slot, which keeps batches inside the slots; a request
    that has waited `max_wait_s` goes before both so nobody starves.

    `skip_to_fit` replaces all of that with SGLang's own order (`_oldest_fitting`), for the
    simulator's model of a plain SGLang engine; the gateway never sets it.
    """

    def __init__(self, weight: Weight, max_wait_s: float, skip_to_fit: bool = False) -> None:
        self._weight = weight
        self.max_wait_s = max_wait_s
        self.skip_to_fit = skip_to_fit
        self._vtime = 0.0
        self._finish: dict[TenantId, float] = {}
        self._versions: dict[VersionId, _VersionQueue] = {}
        self._active_heap: list[_HeapItem] = []
        self._idle_heap: list[_HeapItem] = []
        self._by_age: deque[_Queued] = deque()
        self._seq = itertools.count()
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def push(self, request: Request, now: float) -> None:
        """Add a request whose adapter is ready in engine memory."""
        tenant = request.tenant_id
        start = max(self._vtime, self._finish.get(tenant, 0.0))
        self._finish[tenant] = start + request.cost / self._weight(tenant)
        queued = _Queued(request, start, now)
        vq = self._versions.get(request.version_id)
        if vq is None:
            vq = self._versions[request.version_id] = _VersionQueue()
        vq.items.append(queued)
        if len(vq.items) == 1:
            self._push_head(request.version_id, vq)
        self._by_age.append(queued)
        self.size += 1

    def set_active(self, version: VersionId, active: bool) -> None:
        """The adapter gained or lost its GPU slot."""
        vq = self._versions.get(version)
        if vq is None:
            return
        if vq.active != active:
            vq.active = active
            if vq.items:
                self._push_head(version, vq)

    def peek_choice(
        self, now: float, can_take_slot: bool, yielding: Collection[TenantId] = ()
    ) -> VersionId | None:
        """The adapter whose head request should go next, or None.

        Tenants in `yielding` (over their cold-load budget) take a free GPU slot only when
        no other tenant's request wants one: slots are contained like the cache tiers.
        With `skip_to_fit`, SGLang's own order instead (the simulator's plain way).
        """
        if self.skip_to_fit:
            return self._oldest_fitting(can_take_slot)
        aged = self._oldest()
        if aged is not None and now - aged.entered >= self.max_wait_s:
            version = aged.request.version_id
            if self._versions[version].active or can_take_slot:
                return version
            return None  # hold new slots for the starving request (SGLang's drain idea)
        head = self._valid_top(self._active_heap, active=True)
        if head is not None:
            return head
        if not can_take_slot:
            return None
        if yielding:
            return self._top_not_yielding(yielding)
        return self._valid_top(self._idle_heap, active=False)

    def pop(self, version: VersionId) -> Request:
        """Remove and return the head request of `version`."""
        vq = self._versions[version]
        queued = vq.items.popleft()
        queued.released = True
        self._vtime = max(self._vtime, queued.tag)
        self.size -= 1
        if vq.items:
            self._push_head(version, vq)
        else:
            del self._versions[version]
        return queued.request

    def remove_version(self, version: VersionId) -> list[Request]:
        """Take every queued request of an adapter out (its host copy vanished)."""
        vq = self._versions.pop(version, None)
        if vq is None:
            return []
        for queued in vq.items:
            queued.released = True
        self.size -= len(vq.items)
        return [queued.request for queued in vq.items]

    def waiting_for_slot(self) -> dict[VersionId, tuple[int, float]]:
        """Adapters with queued requests that hold no GPU slot: how many, since when."""
        return {
            version: (len(vq.items), vq.items[0].entered)
            for version, vq in self._versions.items()
            if not vq.active and vq.items
        }

    def _push_head(self, version: VersionId, vq: _VersionQueue) -> None:
        if self.skip_to_fit:
            return  # SGLang's order reads `_by_age` only; the heaps would only grow
        heap = self._active_heap if vq.active else self._idle_heap
        heapq.heappush(heap, (vq.items[0].tag, next(self._seq), version))

    def _valid_top(self, heap: list[_HeapItem], active: bool) -> VersionId | None:
        # Entries go stale when the head changes or the adapter changes heaps; skip them.
        while heap:
            tag, _, version = heap[0]
            vq = self._versions.get(version)
            if vq is not None and vq.active == active and vq.items and vq.items[0].tag == tag:
                return version
            heapq.heappop(heap)
        return None

    def _top_not_yielding(self, yielding: Collection[TenantId]) -> VersionId | None:
        set_aside: list[_HeapItem] = []
        choice = first = self._valid_top(self._idle_heap, active=False)
        while choice is not None and self._tenant(choice) in yielding:
            set_aside.append(heapq.heappop(self._idle_heap))
            choice = self._valid_top(self._idle_heap, active=False)
        for item in set_aside:
            heapq.heappush(self._idle_heap, item)
        return first if choice is None else choice

    def _tenant(self, version: VersionId) -> TenantId:
        return self._versions[version].items[0].request.tenant_id

    def _oldest_fitting(self, can_take_slot: bool) -> VersionId | None:
        """SGLang's scheduler as it ships: the oldest request whose adapter fits the batch
        (it holds a slot, or one is free); others are skipped, not refused, and wait with no
        bound (its drainer, `--lora-drain-wait-threshold`, is off by default). A minority
        adapter starves while popular ones keep every slot busy: the plain way's cliff."""
        self._oldest()  # drops the released ones off the front
        for queued in self._by_age:
            if queued.released:
                continue
            version = queued.request.version_id
            if can_take_slot or self._versions[version].active:
                return version
        return None

    def _oldest(self) -> _Queued | None:
        while self._by_age and self._by_age[0].released:
            self._by_age.popleft()
        return self._by_age[0] if self._by_age else None
