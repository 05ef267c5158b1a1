"""`/api/v1/node-credentials`: operators mint, list and revoke agents' credentials."""

from __future__ import annotations

from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, delete, get, post

from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.nodes.schemas import (
    NodeCredentialCreate,
    NodeCredentialCreated,
    NodeCredentialOut,
)
from loraplex.control.nodes.service import NodeCredentialService

NODE_CREDENTIALS = "/api/v1/node-credentials"


class NodeCredentialController(Controller):
    """One credential per agent, bound to the engine name it may register."""

    tags = ["node-credentials"]
    dependencies = providers.create_service_dependencies(NodeCredentialService, key="nodes")

    @post(NODE_CREDENTIALS, operation_id="MintNodeCredential", opt=access.OPERATOR)
    async def mint(
        self, data: NodeCredentialCreate, nodes: NodeCredentialService, principal: Principal
    ) -> NodeCredentialCreated:
        """Mint a credential for one engine name; the secret is in this response only."""
        return await nodes.mint(data.engine_name, principal.actor)

    @get(NODE_CREDENTIALS, operation_id="ListNodeCredentials", opt=access.OPERATOR)
    async def list_credentials(
        self, nodes: NodeCredentialService, page: LimitOffset
    ) -> OffsetPagination[NodeCredentialOut]:
        """Every credential, newest first (revoked ones too, with `revoked_at`)."""
        rows, total = await nodes.get_many_and_count(page, OrderBy("created_at", "desc"))
        return OffsetPagination([nodes.to_out(r) for r in rows], page.limit, page.offset, total)

    @delete(
        NODE_CREDENTIALS + "/{credential_id:uuid}",
        operation_id="RevokeNodeCredential",
        opt=access.OPERATOR,
        status_code=200,
    )
    async def revoke(
        self, credential_id: UUID, nodes: NodeCredentialService, principal: Principal
    ) -> NodeCredentialOut:
        """Revoke a credential; its agent can no longer register or heartbeat."""
        return nodes.to_out(await nodes.revoke(credential_id, principal.actor))
