"""Resolves a presented bearer key to a Principal, with a short cache.

The cache keeps hot keys from costing a database round trip per request. Its TTL bounds how
long a key revoked on *another* replica keeps working; revocation on this replica evicts at
once. Negative results are not cached, so a new key works immediately.

Entries are keyed by the hash of the whole presented key, never by its prefix alone: the
prefix is shown in key listings, so a cache hit must still prove the secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.principal import Principal
from loraplex.auth.secrets import hash_key, matches, prefix_of
from loraplex.db.models import ApiKey, Tenant, TenantStatus, User
from loraplex.errors import Forbidden, Unauthenticated
from loraplex.ttl_cache import TtlCache

CACHE_TTL_S = 5.0
LAST_USED_RESOLUTION_S = 60.0  # write last_used_at at most once a minute per key


class KeyAuthenticator:
    """Looks keys up by prefix and checks their hash, expiry, revocation and tenant status."""

    def __init__(
        self,
        session_factory: Callable[[], AsyncSession],
        clock: Callable[[], float] = time.monotonic,
    ):
        self._session_factory = session_factory
        self._clock = clock
        self._cache: TtlCache[str, Principal] = TtlCache(CACHE_TTL_S, clock)
        self._last_used_written: dict[str, float] = {}

    def forget(self, prefix: str) -> None:
        """Drop a cached key (call after revoking it or changing its tenant)."""
        self._cache.forget_where(lambda _, principal: principal.key_prefix == prefix)

    def forget_all(self) -> None:
        """Drop every cached key (after a tenant is suspended or deleted)."""
        self._cache.clear()

    async def authenticate(self, presented: str) -> Principal:
        """The principal for a full key, or Unauthenticated / Forbidden naming why not."""
        prefix = prefix_of(presented)
        if prefix is None:
            raise Unauthenticated("malformed API key")
        return await self._cache.get(hash_key(presented), lambda: self._load(prefix, presented))

    async def _load(self, prefix: str, presented: str) -> Principal:
        async with self._session_factory() as session:
            row = (
                await session.execute(
                    select(ApiKey, Tenant.status, User.is_active)
                    .outerjoin(Tenant, Tenant.id == ApiKey.tenant_id)
                    .outerjoin(User, User.id == ApiKey.user_id)
                    .where(ApiKey.prefix == prefix)
                )
            ).one_or_none()
            if row is None or not matches(presented, row[0].secret_hash):
                raise Unauthenticated("unknown API key")
            key, tenant_status, user_active = row
            now = datetime.now(UTC)
            if key.revoked_at is not None:
                raise Unauthenticated("API key has been revoked")
            # Removing a user revokes their keys (UserService.remove); a deactivated user's
            # keys stop working too, without being revoked, until the user is active again.
            if key.user_id is not None and not user_active:
                raise Unauthenticated("API key belongs to a user who is no longer active")
            if key.expires_at is not None and key.expires_at <= now:
                raise Unauthenticated("API key has expired")
            if key.tenant_id is not None and tenant_status != TenantStatus.ACTIVE:
                raise Forbidden(f"tenant is {tenant_status}", headers={})
            await self._touch(session, key, now)
            return Principal(
                key.id, key.prefix, key.tenant_id, frozenset(key.scopes), user_id=key.user_id,
                usage_kind=key.usage_kind,
            )  # fmt: skip

    async def _touch(self, session: AsyncSession, key: ApiKey, now: datetime) -> None:
        mono = self._clock()
        if mono - self._last_used_written.get(key.prefix, -1e9) < LAST_USED_RESOLUTION_S:
            return
        self._last_used_written[key.prefix] = mono
        await session.execute(update(ApiKey).where(ApiKey.id == key.id).values(last_used_at=now))
        await session.commit()
