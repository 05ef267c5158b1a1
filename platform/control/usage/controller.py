"""GET usage reports: a tenant's own, or every tenant's for operators."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from advanced_alchemy.extensions.litestar import providers
from litestar import Controller, get

from loraplex.auth import access
from loraplex.control.usage.schemas import GroupBy, UsageReportOut
from loraplex.control.usage.service import UsageService


class UsageController(Controller):
    """Inference usage, bucketed by minute, hour or day (`start`/`end` are ISO datetimes)."""

    tags = ["usage"]
    dependencies = providers.create_service_dependencies(UsageService, key="usage_service")

    @get("/api/v1/usage", operation_id="GetUsage", opt=access.OPERATOR)
    async def get_usage(
        self,
        usage_service: UsageService,
        start: datetime | None = None,
        end: datetime | None = None,
        group_by: GroupBy = GroupBy.HOUR,
        model: str | None = None,
        tenant_id: UUID | None = None,
    ) -> UsageReportOut:
        """Usage of every tenant, or of one with `tenant_id`; default the last 24 hours."""
        return await usage_service.report(start, end, group_by, tenant_id=tenant_id, model=model)

    @get(
        "/api/v1/tenants/{tenant_id:uuid}/usage",
        operation_id="GetTenantUsage",
        opt=access.tenant(after_deletion=True),
    )
    async def get_tenant_usage(
        self,
        tenant_id: UUID,
        usage_service: UsageService,
        start: datetime | None = None,
        end: datetime | None = None,
        group_by: GroupBy = GroupBy.HOUR,
        model: str | None = None,
    ) -> UsageReportOut:
        """A tenant's usage; default the last 24 hours."""
        return await usage_service.report(start, end, group_by, tenant_id=tenant_id, model=model)
