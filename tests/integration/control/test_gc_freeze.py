"""A served API process exempts its start-up heap from the garbage collector and shows its
collector's pauses (platform/observability/gc_pauses.py)."""

from __future__ import annotations

import gc

from tests.conftest import SCRAPE


async def test_the_served_app_freezes_its_start_up_heap_and_shows_collector_pauses(
    client,
) -> None:
    assert gc.get_freeze_count() > 0  # the lifespan froze what start-up left
    gc.collect(2)
    metrics = (await client.get("/metrics", headers=SCRAPE)).text
    assert 'loraplex_gc_pause_seconds_count{generation="2"}' in metrics
