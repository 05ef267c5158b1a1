"""Minting, listing and revoking node credentials (the agent side is auth/node_credentials)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService

from loraplex.auth.node_credentials import mint_node_secret
from loraplex.control.audit.service import record
from loraplex.control.nodes.schemas import NodeCredentialCreated, NodeCredentialOut
from loraplex.db.models import NodeCredential
from loraplex.errors import NotFound


class NodeCredentialService(SQLAlchemyAsyncRepositoryService[NodeCredential]):
    """Node credentials; only hashes are stored, the secret is returned once by `mint`."""

    class Repo(SQLAlchemyAsyncRepository[NodeCredential]):
        """Node credentials."""

        model_type = NodeCredential

    repository_type = Repo

    async def mint(self, engine_name: str, actor: str) -> NodeCredentialCreated:
        """A new credential for the agent of `engine_name`; the answer holds its secret."""
        new = mint_node_secret()
        row = await self.create(
            NodeCredential(
                engine_name=engine_name,
                prefix=new.prefix,
                secret_hash=new.secret_hash,
                created_by=actor,
            )
        )
        record(self.repository.session, actor, "node_credential.mint", row,
               engine_name=engine_name, prefix=row.prefix)  # fmt: skip
        return NodeCredentialCreated(credential=new.full, **_fields(row))

    async def revoke(self, credential_id: UUID, actor: str) -> NodeCredential:
        """Revoke a credential (idempotent): its agent's next heartbeat is refused."""
        row = await self.get_one_or_none(id=credential_id)
        if row is None:
            raise NotFound("node credential not found")
        if row.revoked_at is None:
            row.revoked_at = datetime.now(UTC)
            row = await self.update(row)
            record(self.repository.session, actor, "node_credential.revoke", row,
                   engine_name=row.engine_name, prefix=row.prefix)  # fmt: skip
        return row

    async def by_prefix(self, prefix: str) -> NodeCredential:
        """The credential whose secret begins `lpxnode_<prefix>_` (the CLI names it so)."""
        row = await self.get_one_or_none(prefix=prefix)
        if row is None:
            raise NotFound(f"no node credential with prefix '{prefix}'")
        return row

    @staticmethod
    def to_out(row: NodeCredential) -> NodeCredentialOut:
        """The listed view of a credential."""
        return NodeCredentialOut(**_fields(row))


def _fields(row: NodeCredential) -> dict[str, object]:
    return {
        "id": row.id,
        "engine_name": row.engine_name,
        "prefix": row.prefix,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "last_used_at": row.last_used_at,
        "revoked_at": row.revoked_at,
    }
