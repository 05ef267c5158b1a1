"""A true lower bound on cold loads: no placement and no eviction policy can make fewer.

Every adapter a request needs must be held somewhere in the cluster (a disk, host memory or
a GPU slot of some node) when the request arrives, and an adapter enters the cluster only by
a cold load from the object store. So the set of adapters held anywhere is one cache, and
the cold loads of any policy are at least the misses of that cache. Relax it further: let
it hold as many adapters as the cluster could if every adapter were the smallest one (all
disks' bytes over the smallest size, plus every host and GPU slot). On that one cache of
equal-sized entries Belady's MIN (evict what is needed farthest ahead) is optimal, so its
misses bound every row from below.

This differs from the simulator's `belady` row, which is Belady's eviction inside the real
multi-node, multi-tier, variable-size system: a heuristic with an oracle, not a bound (the
default policy can beat it). The bound assumes each request needs its adapter at arrival,
which holds for every policy here (placement loads on arrival); a policy that rejects
requests serves fewer and is compared with a bound for more.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from loraplex.serving.policy import NodeSpec
from loraplex.serving.simulator.workload import Workload


def cluster_capacity(nodes: Sequence[NodeSpec], smallest_bytes: int) -> int:
    """The most adapters the cluster could hold at once, were each the smallest."""
    return sum(
        n.disk_budget_bytes // max(1, smallest_bytes) + n.host_slots + n.gpu_slots for n in nodes
    )


def min_cold_loads(workload: Workload, nodes: Sequence[NodeSpec]) -> int:
    """Cold loads no policy can go below on this trace and cluster (module docstring)."""
    if not len(workload):
        return 0
    smallest = min(a.size_bytes for a in workload.adapters)
    return min_misses(workload.adapter, cluster_capacity(nodes, smallest))


def min_misses(sequence: np.ndarray, capacity: int) -> int:
    """Belady's MIN: the fewest misses of a cache of `capacity` equal entries on `sequence`."""
    distinct = int(np.unique(sequence).size)
    if capacity >= distinct:
        return distinct  # nothing is ever evicted: one miss per adapter asked for
    if capacity <= 0:
        return len(sequence)
    next_use = _next_uses(sequence)
    held: dict[int, int] = {}  # adapter -> index of its next use
    farthest: list[tuple[int, int]] = []  # (-next use, adapter); stale entries skipped
    misses = 0
    for index, item in enumerate(sequence.tolist()):
        upcoming = int(next_use[index])
        if item not in held:
            misses += 1
            if len(held) >= capacity:
                while True:
                    negative, victim = heapq.heappop(farthest)
                    if held.get(victim) == -negative:
                        del held[victim]
                        break
        held[item] = upcoming
        heapq.heappush(farthest, (-upcoming, item))
    return misses


def _next_uses(sequence: np.ndarray) -> np.ndarray:
    """For each position, the position where the same adapter is asked for next (len: never)."""
    order = np.argsort(sequence, kind="stable")
    following = np.full(len(sequence), len(sequence), dtype=np.int64)
    same = sequence[order[1:]] == sequence[order[:-1]]
    following[order[:-1][same]] = order[1:][same]
    return following
