"""How fast password guesses may come, without letting anyone lock an account's owner out.

Two limits (`limits`' moving windows, in Redis when the platform has one, so they hold
across API replicas), both counted before the password is checked, so a refused guess
costs no argon2:
- per (email, client address): `per_minute` a minute and `HOURLY_FACTOR` x that an hour:
  one address guessing one account is held to a few guesses a minute, then to the hour's
  few once it keeps going (a backoff in two steps);
- per client address: 10 x `per_minute` a minute, whatever the emails (an office behind
  one NAT signs in from one address; one address trying many accounts is a spray).

Nothing is counted per email alone: that limit let anyone, from anywhere, refuse the
operator their own sign-in by failing on purpose. The owner signing in from their own
address is refused only for their own address's attempts.
"""

from __future__ import annotations

from typing import Any

from limits import RateLimitItemPerHour, RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from litestar import Request
from redis.asyncio import Redis

from loraplex.observability.metrics import count_limit_refusal

ADDRESS_FACTOR = 10
HOURLY_FACTOR = 3


class SignInThrottle:
    """Counts password attempts by (email, address) and by address."""

    def __init__(self, per_minute: int, redis: Redis | None = None):
        storage: Storage = MemoryStorage()
        if redis is not None:  # counts shared by every replica, on the process's own pool
            storage = RedisStorage(
                "async+redis://",
                implementation="redispy",
                key_prefix="loraplex:login",
                connection_pool=redis.connection_pool,
            )
        self._limiter = MovingWindowRateLimiter(storage)
        self._per_account = (
            RateLimitItemPerMinute(per_minute),
            RateLimitItemPerHour(HOURLY_FACTOR * per_minute),
        )
        self._per_address = RateLimitItemPerMinute(ADDRESS_FACTOR * per_minute)

    async def allow_request(self, request: Request[Any, Any, Any], email: str) -> bool:
        """Count one password attempt for `email` from the request's client address."""
        return await self.allow(email, request.client.host if request.client else "unknown")

    async def allow(self, email: str, address: str) -> bool:
        """Count one attempt; False when this address is over its limit, or over its
        limit for this email. Each window's hit is atomic (a burst of parallel guesses
        cannot all pass a check made before the count); a refused hit counts nothing."""
        if not await self._limiter.hit(self._per_address, "address", address):
            count_limit_refusal("sign_in_address")
            return False
        account = (email.strip().lower(), address)
        for item in self._per_account:
            if not await self._limiter.hit(item, "account", *account):
                count_limit_refusal("sign_in_account")
                return False
        return True
