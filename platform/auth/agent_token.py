"""What API processes prove themselves with to `loraplex agent`s: each agent's own secret,
or the shared agent token.

An agent that registers itself (`--register-with`) makes a random secret at start and sends
it in its registration, which its node credential authenticates (auth/node_credentials.py);
the API keeps it per engine, sealed (`seal_agent_secret`), and sends it to that agent only
(serving/live/ops.py `AgentOps`). So a node taken over knows its own agent's secret and no
other. The shared `LORAPLEX_AGENT_TOKEN` stays for agents an operator registered by hand and
for agents from before this release; an agent accepts it only when it is set there too.
Neither is accepted the other way: an agent registers with its node credential.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Mapping

from loraplex.auth.sealed import SealBroken, seal, unseal
from loraplex.errors import Forbidden, Unauthenticated

log = logging.getLogger("loraplex.auth")
SECRET_PURPOSE = b"loraplex agent secrets at rest v1"


def check_agent_token(headers: Mapping[str, str], *accepted: str) -> None:
    """Pass when `headers` carry `Authorization: Bearer <t>` for one of the `accepted` values
    (the agent's own secret, the shared token; empty ones are ignored). No or a wrong
    credential is a 401; a credential on a process that accepts none (agent routes closed)
    a 403."""
    scheme, _sep, presented = headers.get("authorization", "").partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        raise _unauthenticated()
    tokens = [t for t in accepted if t]
    if not tokens:
        raise Forbidden("agent routes need LORAPLEX_AGENT_TOKEN set on this process")
    # compare_digest, against every token: the time taken must not tell which or how much
    # of a guess was right
    matches = [hmac.compare_digest(presented.encode(), t.encode()) for t in tokens]
    if not any(matches):
        raise _unauthenticated()


def new_agent_secret() -> str:
    """A fresh agent secret (43 URL-safe characters: 256 random bits)."""
    return secrets.token_urlsafe(32)


def seal_agent_secret(secret_key: str, engine: str, secret: str) -> str:
    """The agent secret of engine `engine`, sealed for the `engines` table."""
    return seal(secret_key, {"engine": engine, "secret": secret}, SECRET_PURPOSE)


def open_agent_secret(secret_key: str, engine: str, sealed: str | None) -> str:
    """The secret `seal_agent_secret` sealed for `engine`; "" when there is none, or it was
    sealed under another `secret_key` or for another engine (the agent's next heartbeat
    brings it again)."""
    if not sealed or not secret_key:
        return ""
    try:
        opened = unseal(secret_key, sealed, None, SECRET_PURPOSE)
    except SealBroken:
        log.warning("the agent secret of engine %s does not open (secret key changed?)", engine)
        return ""
    if opened.get("engine") != engine:
        log.warning("the agent secret stored for engine %s was sealed for another", engine)
        return ""
    return str(opened.get("secret", ""))


def _unauthenticated() -> Unauthenticated:
    return Unauthenticated(
        "missing or wrong agent token (Authorization: Bearer <the agent's own secret, "
        "or LORAPLEX_AGENT_TOKEN>)",
        headers={"WWW-Authenticate": "Bearer"},
    )
