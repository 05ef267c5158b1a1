"""Sign-ins in progress, between the redirect to the provider and its callback, in Redis.

Each is stored under its `state` and taken with GETDEL, so a state works once, on any API
replica, and for `PENDING_TTL_S`: a replayed callback (the same URL, even with the browser's
old cookie) finds nothing. The entry also holds a random binding kept in the browser's
session cookie, so a callback is accepted only from the browser that began the sign-in.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict, dataclass

from redis.asyncio import Redis

PENDING_TTL_S = 600
KEY_PREFIX = "loraplex:sso:pending:"
MAX_STATE_CHARS = 256


@dataclass(frozen=True, slots=True)
class PendingSignIn:
    """What the callback needs to finish one sign-in."""

    provider: str
    binding: str  # also in the browser's session cookie
    nonce: str
    code_verifier: str
    redirect_uri: str

    @classmethod
    def new(cls, provider: str, binding: str, redirect_uri: str) -> PendingSignIn:
        """Fresh random nonce and PKCE verifier (43+ characters, RFC 7636)."""
        return cls(provider, binding, secrets.token_urlsafe(24), secrets.token_urlsafe(48),
                   redirect_uri)  # fmt: skip


class PendingSignIns:
    """Pending sign-ins by state, each taken at most once."""

    def __init__(self, redis: Redis):
        self._redis = redis

    async def put(self, pending: PendingSignIn) -> str:
        """Store `pending`; the new random state that names it."""
        state = secrets.token_urlsafe(32)
        await self._redis.set(_key(state), json.dumps(asdict(pending)), ex=PENDING_TTL_S)
        return state

    async def take(self, state: str) -> PendingSignIn | None:
        """The sign-in `state` names, removed; None when unknown, expired or already taken."""
        if not state or len(state) > MAX_STATE_CHARS:
            return None
        raw = await self._redis.getdel(_key(state))
        return PendingSignIn(**json.loads(raw)) if raw else None


def _key(state: str) -> str:
    # Hashed: the key's length is fixed whatever a caller sends, and no state sits in clear.
    return KEY_PREFIX + hashlib.sha256(state.encode()).hexdigest()
