"""Python's garbage collector, kept from stalling the event loop, and its pauses counted.

A collection of the oldest generation walks every object the process holds. The API process
holds ~250,000 once started (its imports, routes, templates, schemas), and one such
collection took ~225 ms on the 2-core dev host: every stream on the process waits that long
for its next chunk. Under streamed load they are not rare: a request's objects live for the
whole stream, outlive two young collections and are promoted to the oldest generation, and
CPython collects that generation again once a quarter of its size has been promoted since
the last time (tens of thousands of objects: a few seconds of traffic).

- `freeze_the_startup_heap()`, once the process has started: collect, then move every
  survivor to the permanent generation (`gc.freeze()`). Later collections walk only what
  the process allocated since: the live requests and its caches. What start-up left behind
  is never garbage anyway; reference counting still frees it when it is dropped.
- `count_pauses()`: each collection of the two older generations is timed into
  `loraplex_gc_pause_seconds{generation}`, so a tail can be told from a collector's pause.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from loraplex.observability.metrics import GC_PAUSE

TIMED_GENERATIONS = (1, 2)  # the young one's pauses are tens of microseconds, and frequent


def freeze_the_startup_heap() -> int:
    """Collect once, then exempt every object alive now from later collections; how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


_started: list[float] = []  # when the running collection began (one at a time: the GIL)


def _time_a_collection(phase: str, info: dict[str, Any]) -> None:
    if info["generation"] not in TIMED_GENERATIONS:
        return
    if phase == "start":
        _started[:] = [time.perf_counter()]
    elif _started:
        GC_PAUSE.labels(str(info["generation"])).observe(time.perf_counter() - _started.pop())


def count_pauses() -> None:
    """Time the collections of this process from now on (once, however often called)."""
    if _time_a_collection not in gc.callbacks:
        gc.callbacks.append(_time_a_collection)
