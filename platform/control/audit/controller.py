"""GET the audit log: all of it for operators, a tenant's own part for tenants."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.service import OffsetPagination
from litestar import Controller, get

from loraplex.api.schemas import Output
from loraplex.auth import access
from loraplex.control.audit.service import AuditService
from loraplex.db.models import AuditEntry


class AuditEntryOut(Output):
    """One change."""

    id: UUID
    created_at: datetime
    actor: str
    tenant_id: UUID | None
    action: str
    target_type: str
    target_id: str
    details: dict[str, Any]


class AuditController(Controller):
    """The audit log."""

    tags = ["audit"]
    dependencies = providers.create_service_dependencies(AuditService, key="audit_service")

    @get("/api/v1/audit", operation_id="ListAudit", opt=access.OPERATOR)
    async def list_all(
        self, audit_service: AuditService, page: LimitOffset
    ) -> OffsetPagination[AuditEntryOut]:
        """Every change, newest first."""
        order = OrderBy("created_at", "desc")
        items, total = await audit_service.get_many_and_count(page, order)
        return audit_service.to_schema(items, total, filters=[page], schema_type=AuditEntryOut)

    @get(
        "/api/v1/tenants/{tenant_id:uuid}/audit",
        operation_id="ListTenantAudit",
        opt=access.tenant(after_deletion=True),
    )
    async def list_for_tenant(
        self, tenant_id: UUID, audit_service: AuditService, page: LimitOffset
    ) -> OffsetPagination[AuditEntryOut]:
        """A tenant's changes, newest first."""
        order = OrderBy("created_at", "desc")
        items, total = await audit_service.get_many_and_count(
            page, order, AuditEntry.tenant_id == tenant_id
        )
        return audit_service.to_schema(items, total, filters=[page], schema_type=AuditEntryOut)
