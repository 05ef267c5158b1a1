"""The API process's garbage collector: its start-up heap exempted, its pauses counted."""

from __future__ import annotations

import gc
import time

from prometheus_client import REGISTRY

from loraplex.observability.gc_pauses import count_pauses, freeze_the_startup_heap


def _full_collection_s() -> float:
    started = time.perf_counter()
    gc.collect(2)
    return time.perf_counter() - started


def test_a_full_collection_after_the_freeze_is_a_fraction_of_one_before() -> None:
    gc.unfreeze()  # what an app started earlier in this process froze: walk the whole heap
    before = min(_full_collection_s() for _ in range(3))
    assert freeze_the_startup_heap() > 0
    after = max(_full_collection_s() for _ in range(3))
    assert after < before / 4


def test_each_collection_of_the_oldest_generation_is_counted() -> None:
    count_pauses()
    count_pauses()  # once, however often called
    labels = {"generation": "2"}
    before = REGISTRY.get_sample_value("loraplex_gc_pause_seconds_count", labels) or 0
    gc.collect(2)
    assert REGISTRY.get_sample_value("loraplex_gc_pause_seconds_count", labels) == before + 1
