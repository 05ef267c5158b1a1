"""The shared agent token: one secret between the API processes and `loraplex agent`s.

The API sends it to agents (load, unload); agents send it to the API (self-registration).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from loraplex.errors import Forbidden, Unauthenticated


def check_agent_token(headers: Mapping[str, str], token: str) -> None:
    """Pass when `headers` carry `Authorization: Bearer <token>`. No or a wrong credential is
    a 401; a credential on a process with no token configured (agent routes closed) a 403."""
    scheme, _sep, presented = headers.get("authorization", "").partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        raise _unauthenticated()
    if not token:
        raise Forbidden("agent routes need LORAPLEX_AGENT_TOKEN set on this process")
    # compare_digest: the time taken must not tell how much of a guess was right
    if not hmac.compare_digest(presented.encode(), token.encode()):
        raise _unauthenticated()


def _unauthenticated() -> Unauthenticated:
    return Unauthenticated(
        "missing or wrong agent token (Authorization: Bearer <LORAPLEX_AGENT_TOKEN>)",
        headers={"WWW-Authenticate": "Bearer"},
    )
