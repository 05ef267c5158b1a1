"""Request and response bodies for node credentials."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from loraplex.api.schemas import Input, Output
from loraplex.control.engines.schemas import EngineName


class NodeCredentialCreate(Input):
    """A credential for the agent of one engine: it may register only `engine_name`."""

    engine_name: EngineName


class NodeCredentialOut(Output):
    """A credential as listed: never its secret."""

    id: UUID
    engine_name: str
    prefix: str
    created_by: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class NodeCredentialCreated(NodeCredentialOut):
    """A credential just minted: `credential` is the secret, shown this once. The agent
    reads it from LORAPLEX_NODE_CREDENTIAL."""

    credential: str
