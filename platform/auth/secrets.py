"""API key secrets: generation, parsing and hashing.

A key reads `lpx_<prefix>_<secret>`. The prefix is stored in clear and indexed, so a lookup is
one row; only the SHA-256 of the whole key is stored. A plain hash is right here (not argon2):
the secret has 192 bits of entropy, so there is nothing to brute-force, and every request
verifies a key, so the check must take microseconds.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

PREFIX_CHARS = 10
SECRET_BYTES = 24


@dataclass(frozen=True, slots=True)
class NewKey:
    """A freshly minted key: `full` is shown to the user once and never stored."""

    full: str
    prefix: str
    secret_hash: str


BRAND = "lpx"  # every key begins `lpx_<prefix>_`


def mint_key(brand: str = BRAND) -> NewKey:
    """Create a random key and what the database stores of it."""
    prefix = secrets.token_hex(PREFIX_CHARS // 2)
    full = f"{brand}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    return NewKey(full=full, prefix=prefix, secret_hash=hash_key(full))


def hash_key(full: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(full.encode()).hexdigest()


def prefix_of(full: str) -> str | None:
    """The lookup prefix of a presented key, or None when it is not shaped like one of ours."""
    parts = full.split("_", 2)
    if len(parts) != 3 or len(parts[1]) != PREFIX_CHARS or not parts[2]:
        return None
    return parts[1]


def matches(full: str, secret_hash: str) -> bool:
    """Constant-time comparison of a presented key with a stored hash."""
    return hmac.compare_digest(hash_key(full), secret_hash)
