"""A tenant offering five times its quota is refused with 429s, and another tenant's TTFT holds."""

from __future__ import annotations

import asyncio

import pytest

from loraplex.bench.overload import Outcome, open_loop
from loraplex.bench.tenants import tenant_key
from tests.integration.conftest import Served

pytestmark = pytest.mark.engine
SECONDS, MAX_TOKENS = 10.0, 16


def _key(served: Served, **limits: int) -> str:
    return tenant_key(served.url, served.operator_key, **limits)


def test_a_noisy_tenant_gets_429s_and_the_other_keeps_its_ttft(served: Served) -> None:
    # A token bucket lets a full minute of quota through at once, so "5x the quota" over a
    # 10 s test means five times what the bucket admits in that time (quota + refill).
    quota_rpm = 3
    a_rate = 5 * (quota_rpm + quota_rpm * SECONDS / 60) / SECONDS
    noisy, quiet = _key(served, requests_per_minute=quota_rpm), _key(served)
    b_rate = 1.5
    alone = [asyncio.run(open_loop(served.url, quiet, b_rate, SECONDS, MAX_TOKENS, seed=1))]

    async def together() -> tuple[Outcome, Outcome]:
        return await asyncio.gather(
            open_loop(served.url, noisy, a_rate, SECONDS, MAX_TOKENS, seed=2),
            open_loop(served.url, quiet, b_rate, SECONDS, MAX_TOKENS, seed=1),
        )

    # B's p99 over ~15 requests is its slowest one, so one stall of this shared 2-core
    # machine can decide it: a second try must then hold the bound (a real noisy neighbour
    # fails both).
    tries = []
    for _ in range(2):
        a, b = asyncio.run(together())
        alone.append(asyncio.run(open_loop(served.url, quiet, b_rate, SECONDS, MAX_TOKENS, seed=1)))
        assert a.refused_with(429) >= 5, a.refused  # A offered ~5x its quota
        assert not b.refused and b.failed == 0
        baseline = max(o.p(0.99) for o in alone)  # B alone, measured before and after
        tries.append((b.p(0.99), baseline))
        if b.p(0.99) <= 1.25 * baseline:
            return
    raise AssertionError(f"B's p99 with A vs alone, per try (ms): {tries}")
