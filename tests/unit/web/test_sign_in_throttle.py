"""The sign-in throttle slows one address guessing, and never refuses the account's owner
for what other addresses did."""

from __future__ import annotations

import asyncio

from loraplex.web.sign_in_throttle import ADDRESS_FACTOR, SignInThrottle

OPERATOR = "ops@example.com"


async def test_one_address_guessing_one_account_is_refused_past_the_limit() -> None:
    throttle = SignInThrottle(per_minute=5)
    allowed = [await throttle.allow(OPERATOR, "203.0.113.9") for _ in range(7)]
    assert allowed == [True] * 5 + [False] * 2


async def test_the_owner_signs_in_from_their_address_while_another_is_refused() -> None:
    throttle = SignInThrottle(per_minute=5)
    for _ in range(20):
        await throttle.allow(OPERATOR, "203.0.113.9")  # the attacker, refused after 5
    assert await throttle.allow(OPERATOR.upper(), "198.51.100.7")  # the owner, elsewhere


async def test_many_addresses_failing_on_one_account_do_not_lock_it() -> None:
    throttle = SignInThrottle(per_minute=2)
    for host in range(50):  # a botnet, two guesses per address
        for _ in range(2):
            await throttle.allow(OPERATOR, f"10.0.0.{host}")
    assert await throttle.allow(OPERATOR, "198.51.100.7")


async def test_one_address_spraying_many_accounts_is_refused_past_its_own_limit() -> None:
    throttle = SignInThrottle(per_minute=2)
    allowed = [
        await throttle.allow(f"user{i}@example.com", "203.0.113.9")
        for i in range(ADDRESS_FACTOR * 2 + 3)
    ]
    assert allowed.count(True) == ADDRESS_FACTOR * 2
    assert allowed[-3:] == [False] * 3


async def test_a_burst_of_parallel_guesses_gets_no_more_than_the_limit() -> None:
    throttle = SignInThrottle(per_minute=5)
    allowed = await asyncio.gather(*(throttle.allow(OPERATOR, "203.0.113.9") for _ in range(40)))
    assert sum(allowed) == 5
