"""Every table, imported in one place so Alembic and the metadata see them all."""

from loraplex.db.models.adapters import (
    Adapter,
    AdapterAlias,
    AdapterVersion,
    VersionSource,
    VersionStatus,
)
from loraplex.db.models.audit import AuditEntry
from loraplex.db.models.base_models import BaseModel
from loraplex.db.models.engines import Engine, EngineKind, EngineStatus
from loraplex.db.models.finetune import (
    DatasetFile,
    FileStatus,
    FineTuneCheckpoint,
    FineTuneEvent,
    FineTuneJob,
    JobStatus,
)
from loraplex.db.models.keys import ApiKey
from loraplex.db.models.tenants import Plan, QuotaOverride, Tenant, TenantStatus
from loraplex.db.models.usage import Usage
from loraplex.db.models.users import User, UserRole
from loraplex.db.orm import Base

__all__ = [
    "Adapter",
    "AdapterAlias",
    "AdapterVersion",
    "ApiKey",
    "AuditEntry",
    "Base",
    "BaseModel",
    "DatasetFile",
    "Engine",
    "EngineKind",
    "EngineStatus",
    "FileStatus",
    "FineTuneCheckpoint",
    "FineTuneEvent",
    "FineTuneJob",
    "JobStatus",
    "Plan",
    "QuotaOverride",
    "Tenant",
    "TenantStatus",
    "Usage",
    "User",
    "UserRole",
    "VersionSource",
    "VersionStatus",
]
