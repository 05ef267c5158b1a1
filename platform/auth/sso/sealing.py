"""Refresh tokens at rest: sealed with AES-GCM under a key derived from the secret key.

A provider's refresh token is a credential for the user at that provider, so the database
holds it only sealed. The row's (provider, subject) is the associated data: a sealed token
copied to another row does not open. After `LORAPLEX_SECRET_KEY` changes, no sealed token
opens, and each SSO user simply signs in again at their next renewal.
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12


class TokenSeal:
    """Seals and opens refresh tokens bound to one identity."""

    def __init__(self, secret_key: str):
        key = hashlib.sha256(b"loraplex-sso-refresh-token\0" + secret_key.encode()).digest()
        self._aead = AESGCM(key)

    def seal(self, token: str, bound_to: str) -> str:
        """`token` sealed, for the identity named `bound_to`."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, token.encode(), bound_to.encode())
        return base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, sealed: str, bound_to: str) -> str | None:
        """The token, or None when it was sealed under another key or for another identity."""
        try:
            raw = base64.urlsafe_b64decode(sealed.encode())
            opened = self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], bound_to.encode())
        except (InvalidTag, ValueError):
            return None
        return opened.decode()
