"""Password checks off the event loop, a few at a time.

argon2 costs ~0.1-0.2 s of CPU and 64 MiB per check by design. Run on the event loop, one
sign-in stalled every stream of the process for that long (measured: a 0.53 s pause of a
1 ms timer for four checks). argon2-cffi calls libargon2 through CFFI, which releases the
GIL for the length of a C call (CFFI's documented behaviour since 0.3), so a thread is
enough: the same four checks in threads left the loop's worst pause at 0.05 s on two busy
cores. At most `MAX_CONCURRENT_CHECKS` run at once, so a flood of sign-ins queues here
rather than taking every core and 64 MiB per check.

Sign-ins, which anyone can send, go further: with the API's `password_pool`
(`loraplex.cpu_pool`, one niced worker process of their own) the check and its 64 MiB run
outside the API process, so a flood of wrong passwords neither takes the streams' cores nor
grows the API's memory, and never queues behind an upload's check.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import weakref

import anyio
import anyio.to_thread
from argon2 import PasswordHasher

from loraplex.cpu_pool import CpuPool

MAX_CONCURRENT_CHECKS = 2
_hasher = PasswordHasher()


def hash_password(password: str) -> str:
    """argon2id hash of a password."""
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """Whether `password` matches the stored argon2 hash."""
    try:
        return _hasher.verify(password_hash, password)
    except Exception:  # argon2 raises several mismatch/invalid-hash errors
        return False


def check_password(password_hash: str | None, password: str) -> bool:
    """`password_matches`'s work in one call, for a worker process."""
    return verify_password(password_hash or _dummy_hash(), password) and bool(password_hash)


# One limiter per event loop: a limiter's waiters belong to the loop that made them.
_LIMITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(MAX_CONCURRENT_CHECKS)
    return limiter


@functools.cache
def _dummy_hash() -> str:
    return hash_password(secrets.token_hex(16))


async def password_matches(
    password_hash: str | None, password: str, pool: CpuPool | None = None
) -> bool:
    """Whether `password` matches `password_hash`; as slow when there is no hash (an
    unknown email), so the time taken tells nothing. In `pool`'s worker when given."""
    if pool is not None:
        async with _limiter():
            return await pool.run(check_password, password_hash, password)
    stored = password_hash or await anyio.to_thread.run_sync(_dummy_hash, limiter=_limiter())
    matches = await anyio.to_thread.run_sync(verify_password, stored, password, limiter=_limiter())
    return bool(password_hash) and matches
