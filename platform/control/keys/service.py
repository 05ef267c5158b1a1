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
from loraplex.db.models.keys import INFERENCE_USAGE
from loraplex.errors import InvalidInput, NotFound


class ApiKeyService(SQLAlchemyAsyncRepositoryService[ApiKey]):
    """API keys of tenants and operators."""

    class Repo(SQLAlchemyAsyncRepository[ApiKey]):
        """API keys."""

        model_type = ApiKey

    repository_type = Repo

    async def create_tenant_key(
        self,
        tenant_id: UUID,
        data: KeyCreate,
        actor: str,
        user_id: UUID | None = None,
        *,
        usage_kind: str = INFERENCE_USAGE,
    ) -> KeyCreated:
        """Mint a key for a tenant; its scopes must be tenant scopes. `user_id`: the user it
        is made for (the console's signed-in user, or the user of the key that asks), whose
        removal revokes it. `usage_kind`: what its tokens are in the tenant's spend (the
        eval worker's keys: "eval"); never taken from a request."""
        unknown = sorted(set(data.scopes) - Scope.TENANT_SCOPES)
        if unknown or not data.scopes:
            raise InvalidInput(
                f"invalid scopes {unknown or []}; allowed: {sorted(Scope.TENANT_SCOPES)}",
                param="scopes",
            )
        if data.expires_at is not None and _aware(data.expires_at) <= datetime.now(UTC):
            raise InvalidInput("expires_at is in the past", param="expires_at")
        return await self._mint(
            tenant_id, data.name, sorted(set(data.scopes)), data.expires_at, actor, user_id,
            usage_kind,
        )  # fmt: skip

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
        usage_kind: str = INFERENCE_USAGE,
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
                usage_kind=usage_kind,
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
            **({} if usage_kind == INFERENCE_USAGE else {"usage_kind": usage_kind}),
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

    async def revoke_all_of_user(self, user_id: UUID, actor: str) -> list[str]:
        """Revoke every live key of `user_id` in the caller's transaction (the user is being
        removed: `ondelete=SET NULL` would otherwise leave their keys working, nobody's)."""
        keys = await self.list(ApiKey.user_id == user_id, ApiKey.revoked_at.is_(None))
        now = datetime.now(UTC)
        for key in keys:
            key.revoked_at = now
            record(self.repository.session, actor, "api_key.revoke", key,
                   tenant_id=key.tenant_id, prefix=key.prefix, reason="user removed")  # fmt: skip
            announce(self.repository.session, Change.KEY_REVOKED, key.prefix)
        await self.repository.session.flush()
        return [key.prefix for key in keys]

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
