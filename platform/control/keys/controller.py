"""HTTP routes for a tenant's API keys."""

from __future__ import annotations

from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, delete, get, post

from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.keys.schemas import KeyCreate, KeyCreated, KeyOut
from loraplex.control.keys.service import ApiKeyService
from loraplex.db.models import ApiKey

KEYS = "/api/v1/tenants/{tenant_id:uuid}/api-keys"


class ApiKeyController(Controller):
    """Create (secret shown once), list and revoke a tenant's keys."""

    tags = ["api-keys"]
    dependencies = providers.create_service_dependencies(ApiKeyService, key="keys")

    @post(KEYS, operation_id="CreateApiKey", opt=access.tenant())
    async def create_key(
        self, tenant_id: UUID, data: KeyCreate, keys: ApiKeyService, principal: Principal
    ) -> KeyCreated:
        """Create a key; the response holds the secret, which is never shown again."""
        return await keys.create_tenant_key(tenant_id, data, principal.actor, principal.user_id)

    @get(KEYS, operation_id="ListApiKeys", opt=access.tenant())
    async def list_keys(
        self, tenant_id: UUID, keys: ApiKeyService, page: LimitOffset
    ) -> OffsetPagination[KeyOut]:
        """The tenant's keys, newest first."""
        items, total = await keys.get_many_and_count(
            page, OrderBy("created_at", "desc"), ApiKey.tenant_id == tenant_id
        )
        return OffsetPagination([keys.to_out(k) for k in items], page.limit, page.offset, total)

    @delete(
        f"{KEYS}/{{key_id:uuid}}", operation_id="RevokeApiKey", opt=access.tenant(), status_code=200
    )
    async def revoke_key(
        self,
        tenant_id: UUID,
        key_id: UUID,
        keys: ApiKeyService,
        principal: Principal,
    ) -> KeyOut:
        """Revoke a key; it stops working at once, on every replica."""
        key = await keys.revoke(tenant_id, key_id, principal.actor)
        return keys.to_out(key)
