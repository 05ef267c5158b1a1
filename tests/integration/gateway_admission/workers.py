"""Code run in child processes: separate API replicas sharing one Redis."""

from __future__ import annotations

import asyncio
from multiprocessing.queues import SimpleQueue
from multiprocessing.synchronize import Barrier, Event

from loraplex.gateway.admission import RateLimited, TenantQuotas, Ticket


def hammer(
    url: str,
    prefix: str,
    limits: dict[str, int],
    attempts: int,
    start: Barrier,
    results: SimpleQueue[int],
) -> None:
    """Try `attempts` admissions for tenant "shared" once every replica is ready; report wins."""
    results.put(asyncio.run(_hammer(url, prefix, limits, attempts, start)))


async def _hammer(
    url: str, prefix: str, limits: dict[str, int], attempts: int, start: Barrier
) -> int:
    gate = TenantQuotas(url, key_prefix=prefix, timeout_s=1.0)
    await gate.client.ping()  # connect before the race starts
    start.wait()
    admitted = 0
    for i in range(attempts):
        try:
            await gate.admit(
                "shared", limits, request_id=f"{id(gate)}-{i}", stream=False, estimated_tokens=1
            )
            admitted += 1
        except RateLimited:
            pass
    await gate.aclose()
    return admitted


def hold_slots(url: str, prefix: str, slots: int, lease_s: float, holding: Event) -> None:
    """Take `slots` streams for tenant "victim", renew them, and never finish."""
    asyncio.run(_hold_slots(url, prefix, slots, lease_s, holding))


async def _hold_slots(url: str, prefix: str, slots: int, lease_s: float, holding: Event) -> None:
    gate = TenantQuotas(url, key_prefix=prefix, lease_s=lease_s, timeout_s=1.0)
    limits = {"concurrent_requests": slots, "concurrent_streams": slots}
    async with asyncio.TaskGroup() as group:
        for i in range(slots):
            ticket = await gate.admit(
                "victim", limits, request_id=f"held-{i}", stream=True, estimated_tokens=1
            )
            group.create_task(_hold_forever(gate, ticket))
        holding.set()


async def _hold_forever(gate: TenantQuotas, ticket: Ticket) -> None:
    async with gate.hold(ticket):
        await asyncio.Event().wait()  # until the process is killed
