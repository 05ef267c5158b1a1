"""The authenticated caller, as every handler and service sees it."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID


class Scope:
    """Names of key scopes. `admin` implies `read`; operators hold every scope."""

    OPERATOR = "operator"
    ADMIN = "admin"
    READ = "read"
    INFERENCE = "inference"
    FINE_TUNE = "fine-tune"

    TENANT_SCOPES = frozenset({ADMIN, READ, INFERENCE, FINE_TUNE})


@dataclass(frozen=True, slots=True)
class Principal:
    """A resolved API key: operator keys have no tenant."""

    key_id: UUID
    key_prefix: str
    tenant_id: UUID | None
    scopes: frozenset[str] = field(default_factory=frozenset)
    # The user the key was made for (or by): their removal revokes it. None: nobody's.
    user_id: UUID | None = None
    # What its tokens are in the tenant's spend: "inference", or "eval" (an eval run's key).
    usage_kind: str = "inference"

    @property
    def is_operator(self) -> bool:
        """Operators see and change everything."""
        return self.tenant_id is None and Scope.OPERATOR in self.scopes

    @property
    def actor(self) -> str:
        """How the audit log names this caller."""
        return f"key:{self.key_prefix}"

    def has_scope(self, scope: str) -> bool:
        """Whether this key may act with `scope`."""
        if self.is_operator or scope in self.scopes:
            return True
        return scope == Scope.READ and Scope.ADMIN in self.scopes

    def can_see_tenant(self, tenant_id: UUID) -> bool:
        """Whether objects of `tenant_id` exist for this caller (else they are a 404)."""
        return self.is_operator or self.tenant_id == tenant_id


CLI_ACTOR = "cli"
