"""The shared agent token: one secret between the API processes and `loraplex agent`s.

The API sends it to agents (load, unload); agents send it to the API (self-registration).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from loraplex.errors import Forbidden, Unauthenticated


def check_agent_token(headers: Mapping[str, str], token: str) -> None:
    """Pass when `headers` carry `Authorization: Bearer <token>`; 401 otherwise, 403 when
    this process has no token configured (agent routes are then closed)."""
    if not token:
        raise Forbidden("agent routes need LORAPLEX_AGENT_TOKEN set on this process")
    scheme, _sep, presented = headers.get("authorization", "").partition(" ")
    # compare_digest: the time taken must not tell how much of a guess was right
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        presented.strip().encode(), token.encode()
    ):
        raise Unauthenticated(
            "missing or wrong agent token (Authorization: Bearer <LORAPLEX_AGENT_TOKEN>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
