"""Secrets sealed for a trip through the broker: a tenant's import credentials.

They are used once and never stored: the API seals them into the task message with a key
derived from `secret_key` (Fernet: AES-CBC with an HMAC, so a changed message is refused),
the worker opens them and forgets them. A message older than `max_age_s` is refused too,
so a message lifted from the broker stops being useful.

Agents' secrets are sealed the same way for the `engines` table (auth/agent_token.py), under
a key of their own (`purpose`) and with no age limit: their agent re-sends them every beat.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PURPOSE = b"loraplex sealed task secrets v1"


class SealBroken(Exception):
    """A sealed value that was changed, sealed under another secret, or is too old."""


def _fernet(secret_key: str, purpose: bytes) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def seal(secret_key: str, value: dict[str, Any], purpose: bytes = PURPOSE) -> str:
    """`value` as an opaque token only holders of `secret_key` can open (for `purpose`)."""
    return _fernet(secret_key, purpose).encrypt(json.dumps(value).encode()).decode()


def unseal(
    secret_key: str, token: str, max_age_s: int | None, purpose: bytes = PURPOSE
) -> dict[str, Any]:
    """The value `seal` sealed (for `purpose`, at most `max_age_s` ago unless None), or
    SealBroken."""
    try:
        fernet = _fernet(secret_key, purpose)
        opened: dict[str, Any] = json.loads(fernet.decrypt(token, ttl=max_age_s))
    except (InvalidToken, ValueError) as exc:
        raise SealBroken("the sealed value is changed, foreign or expired") from exc
    return opened
