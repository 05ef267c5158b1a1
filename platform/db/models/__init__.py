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
from loraplex.db.models.budgets import Budget, ModelPrice, Spend
from loraplex.db.models.engines import Engine, EngineKind, EngineStatus
from loraplex.db.models.evals import Eval, EvalRun, EvalRunItem, RunStatus
from loraplex.db.models.finetune import (
    DatasetFile,
    FileStatus,
    FineTuneCheckpoint,
    FineTuneEvent,
    FineTuneJob,
    JobStatus,
)
from loraplex.db.models.imports import AdapterImport, ImportStatus
from loraplex.db.models.keys import ApiKey
from loraplex.db.models.nodes import NodeCredential
from loraplex.db.models.probes import ProbeAnswer, ProbeReplay
from loraplex.db.models.sso import ExternalIdentity
from loraplex.db.models.tenants import Plan, QuotaOverride, Tenant, TenantStatus
from loraplex.db.models.usage import Usage
from loraplex.db.models.users import User, UserRole
from loraplex.db.orm import Base

__all__ = [
    "Adapter",
    "AdapterAlias",
    "AdapterImport",
    "AdapterVersion",
    "ApiKey",
    "AuditEntry",
    "Base",
    "BaseModel",
    "Budget",
    "DatasetFile",
    "Engine",
    "EngineKind",
    "EngineStatus",
    "Eval",
    "EvalRun",
    "EvalRunItem",
    "ExternalIdentity",
    "FileStatus",
    "FineTuneCheckpoint",
    "FineTuneEvent",
    "FineTuneJob",
    "ImportStatus",
    "JobStatus",
    "ModelPrice",
    "NodeCredential",
    "Plan",
    "ProbeAnswer",
    "ProbeReplay",
    "QuotaOverride",
    "RunStatus",
    "Spend",
    "Tenant",
    "TenantStatus",
    "Usage",
    "User",
    "UserRole",
    "VersionSource",
    "VersionStatus",
]
