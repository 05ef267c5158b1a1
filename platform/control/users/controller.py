"""HTTP routes for a tenant's users."""

from __future__ import annotations

from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, delete, get, post

from loraplex.auth import access
from loraplex.auth.principal import Principal
from loraplex.control.users.service import UserCreate, UserOut, UserService
from loraplex.db.models import User

USERS = "/api/v1/tenants/{tenant_id:uuid}/users"


class UserController(Controller):
    """Create, list and delete a tenant's users."""

    tags = ["users"]
    dependencies = providers.create_service_dependencies(UserService, key="users")

    @post(USERS, operation_id="CreateUser", opt=access.tenant())
    async def create_user(
        self, tenant_id: UUID, data: UserCreate, users: UserService, principal: Principal
    ) -> UserOut:
        """Create a user in the tenant."""
        return users.to_schema(
            await users.create_user(tenant_id, data, principal.actor), schema_type=UserOut
        )

    @get(USERS, operation_id="ListUsers", opt=access.tenant())
    async def list_users(
        self, tenant_id: UUID, users: UserService, page: LimitOffset
    ) -> OffsetPagination[UserOut]:
        """The tenant's users."""
        items, total = await users.get_many_and_count(
            page, OrderBy("email", "asc"), User.tenant_id == tenant_id
        )
        return users.to_schema(items, total, filters=[page], schema_type=UserOut)

    @delete(f"{USERS}/{{user_id:uuid}}", operation_id="DeleteUser", opt=access.tenant())
    async def delete_user(
        self, tenant_id: UUID, user_id: UUID, users: UserService, principal: Principal
    ) -> None:
        """Delete a user of the tenant."""
        await users.remove(tenant_id, user_id, principal.actor)
