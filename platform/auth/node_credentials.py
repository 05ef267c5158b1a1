"""Node credentials: how a `loraplex agent` proves which engine it speaks for.

An operator mints one per engine name (`POST /api/v1/node-credentials`, or `loraplex nodes
mint`); the secret, `lpxnode_<prefix>_<secret>`, is shown once and only its SHA-256 is
stored (auth/secrets.py says why a plain hash fits a random secret). The agent routes
(`/api/v1/agents/engines/{name}`) take it as a bearer token and serve only the engine it
names: a node that is taken over can change its own engine's registration, never another's,
and cannot register a name it was not given.

`check_node_credential` is the rule (pure); `authenticate_node` looks the row up around it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.secrets import NewKey, matches, mint_key, prefix_of
from loraplex.db.models import NodeCredential
from loraplex.errors import Forbidden, Unauthenticated

NODE_BRAND = "lpxnode"  # distinct from API keys' `lpx`: neither is mistaken for the other
LAST_USED_RESOLUTION = timedelta(minutes=1)  # agents heartbeat every few seconds


def mint_node_secret() -> NewKey:
    """A new random node credential and what the database stores of it."""
    return mint_key(NODE_BRAND)


def bearer_of(headers: Mapping[str, str]) -> str:
    """The bearer token of a request; 401 when there is none."""
    scheme, _sep, presented = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise _unauthenticated("missing node credential")
    return presented.strip()


def check_node_credential(
    row: NodeCredential | None, presented: str, engine_name: str
) -> NodeCredential:
    """The credential `row` when `presented` is its secret, live, and bound to `engine_name`;
    401 for an unknown, wrong or revoked secret, 403 for another engine's credential."""
    if row is None or not matches(presented, row.secret_hash):
        raise _unauthenticated("unknown node credential")
    if row.revoked_at is not None:
        raise _unauthenticated("this node credential has been revoked")
    if row.engine_name != engine_name:
        raise Forbidden(
            f"this node credential is for engine '{row.engine_name}', not '{engine_name}'"
        )
    return row


async def authenticate_node(
    session: AsyncSession, headers: Mapping[str, str], engine_name: str
) -> NodeCredential:
    """The live credential the request carries for `engine_name` (see check_node_credential)."""
    presented = bearer_of(headers)
    prefix = prefix_of(presented) if presented.startswith(NODE_BRAND + "_") else None
    row = None
    if prefix is not None:
        row = await session.scalar(select(NodeCredential).where(NodeCredential.prefix == prefix))
    credential = check_node_credential(row, presented, engine_name)
    await _touch(session, credential)
    return credential


async def _touch(session: AsyncSession, credential: NodeCredential) -> None:
    now = datetime.now(UTC)
    last = credential.last_used_at
    if last is not None and now - last < LAST_USED_RESOLUTION:
        return
    await session.execute(
        update(NodeCredential).where(NodeCredential.id == credential.id).values(last_used_at=now)
    )
    await session.commit()


def _unauthenticated(why: str) -> Unauthenticated:
    return Unauthenticated(
        f"{why} (Authorization: Bearer <node credential from `loraplex nodes mint`>)",
        headers={"WWW-Authenticate": "Bearer"},
    )
