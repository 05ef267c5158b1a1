"""API keys: minting (secret shown once), listing and revoking."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from advanced_alchemy.repository import SQLAlchemyAsyncRepository
from advanced_alchemy.service import SQLAlchemyAsyncRepositoryService

from loraplex.auth.principal import Scope
from loraplex.auth.secrets import mint_key
from loraplex.changes import Change, announce
from loraplex.control.audit.service import record
from loraplex.control.keys.schemas import KeyCreate, KeyCreated, KeyOut
from loraplex.db.models import ApiKey
from loraplex.errors import InvalidInput, NotFound


class ApiKeyService(SQLAlchemyAsyncRepositoryService[ApiKey]):
    """API keys of tenants and operators."""

    class Repo(SQLAlchemyAsyncRepository[ApiKey]):
        """API keys."""

        model_type = ApiKey

    repository_type = Repo

    async def create_tenant_key(self, tenant_id: UUID, data: KeyCreate, actor: str) -> KeyCreated:
        """Mint a key for a tenant; its scopes must be tenant scopes."""
        unknown = sorted(set(data.scopes) - Scope.TENANT_SCOPES)
        if unknown or not data.scopes:
            raise InvalidInput(
                f"invalid scopes {unknown or []}; allowed: {sorted(Scope.TENANT_SCOPES)}",
                param="scopes",
            )
        if data.expires_at is not None and _aware(data.expires_at) <= datetime.now(UTC):
            raise InvalidInput("expires_at is in the past", param="expires_at")
        return await self._mint(
            tenant_id, data.name, sorted(set(data.scopes)), data.expires_at, actor
        )

    async def create_operator_key(
        self, name: str, actor: str, user_id: UUID | None = None
    ) -> KeyCreated:
        """Mint an operator key (CLI only: the first one has no caller to authorise it)."""
        return await self._mint(None, name, [Scope.OPERATOR], None, actor, user_id)

    async def _mint(
        self,
        tenant_id: UUID | None,
        name: str,
        scopes: list[str],
        expires_at: datetime | None,
        actor: str,
        user_id: UUID | None = None,
    ) -> KeyCreated:
        new = mint_key()
        key = await self.create(
            ApiKey(
                tenant_id=tenant_id,
                user_id=user_id,
                name=name,
                prefix=new.prefix,
                secret_hash=new.secret_hash,
                scopes=scopes,
                expires_at=expires_at and _aware(expires_at),
            )
        )
        record(
            self.repository.session,
            actor,
            "api_key.create",
            key,
            tenant_id=tenant_id,
            name=name,
            prefix=key.prefix,
            scopes=scopes,
        )
        return KeyCreated(key=new.full, **_fields(key))

    async def revoke(self, tenant_id: UUID, key_id: UUID, actor: str) -> ApiKey:
        """Revoke a tenant's key (idempotent)."""
        key = await self.get_one_or_none(id=key_id, tenant_id=tenant_id)
        if key is None:
            raise NotFound("API key not found")
        if key.revoked_at is None:
            key.revoked_at = datetime.now(UTC)
            key = await self.update(key)
            record(
                self.repository.session,
                actor,
                "api_key.revoke",
                key,
                tenant_id=tenant_id,
                prefix=key.prefix,
            )
            announce(self.repository.session, Change.KEY_REVOKED, key.prefix)
        return key

    @staticmethod
    def to_out(key: ApiKey) -> KeyOut:
        """The listed view of a key."""
        return KeyOut(**_fields(key))


def _fields(key: ApiKey) -> dict[str, object]:
    return {
        "id": key.id,
        "tenant_id": key.tenant_id,
        "name": key.name,
        "prefix": key.prefix,
        "scopes": list(key.scopes),
        "created_at": key.created_at,
        "expires_at": key.expires_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
    }


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
