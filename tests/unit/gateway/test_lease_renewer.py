"""The lease renewer stops promptly, whatever its Redis call does with the cancellation."""

from __future__ import annotations

import asyncio
import time

from loraplex.gateway.admission.leases import STOP_WAIT_S, LeaseRenewer
from loraplex.gateway.admission.ticket import Ticket


def _ticket() -> Ticket:
    return Ticket("t", "r1", True, 10, None, 0, ("lease-key",), None, None)


def test_stop_returns_even_when_the_renew_call_swallows_the_cancellation() -> None:
    calls = 0

    async def stubborn_renew(_: Ticket) -> int:
        # What was seen under load: a cancellation delivered inside the Redis call is lost
        # and the call returns normally.
        nonlocal calls
        calls += 1
        try:
            await asyncio.sleep(0.3)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
        return 1

    async def scenario() -> tuple[float, bool]:
        renewer = LeaseRenewer(_ticket(), stubborn_renew, lease_s=0.03)  # renews every 10 ms
        renewer.start()
        await asyncio.sleep(0.05)  # now inside a renew call
        started = time.perf_counter()
        await renewer.stop()
        stopped_in = time.perf_counter() - started
        await asyncio.sleep(0.5)  # a loop that survived would renew again here
        return stopped_in, calls

    stopped_in, total_calls = asyncio.run(scenario())
    assert stopped_in <= STOP_WAIT_S + 0.2
    assert total_calls == 1, "the renewal loop kept running after stop"


def test_stop_does_not_swallow_the_callers_own_cancellation() -> None:
    async def slow_renew(_: Ticket) -> int:
        await asyncio.sleep(5)
        return 1

    async def scenario() -> bool:
        renewer = LeaseRenewer(_ticket(), slow_renew, lease_s=0.03)
        renewer.start()
        await asyncio.sleep(0.05)
        stopper = asyncio.create_task(renewer.stop())
        await asyncio.sleep(0)
        stopper.cancel()
        try:
            await stopper
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(scenario()), "cancelling the caller of stop() must cancel it"
