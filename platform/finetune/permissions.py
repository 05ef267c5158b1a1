"""What a fine-tuning job may change when it succeeds, decided when it is created.

A job's result becomes the next version of adapter `<suffix>` and may move an alias to it
(workers/finish.py). Both change what a tenant's requests are served: an adapter without a
`prod` alias serves its newest ready version, and an alias is what requests name. Through
the API both need the `admin` scope (uploading a version, moving an alias), so a job may do
them only for a key that could: a `fine-tune` key may train new adapters, not replace what
an existing one serves. The check runs at creation, against the creating key, so a job
held for a gated promotion still moves its alias later. An adapter created under the same
name by an admin between a job's creation and its finish receives the job's version: the
admin is the more privileged party, and the job's key could not cause it.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth.principal import Principal, Scope
from loraplex.db.models import Adapter
from loraplex.errors import Forbidden


@dataclass(frozen=True, slots=True)
class JobRights:
    """What the creator of a job may change through the API."""

    may_write_adapters: bool  # add versions to adapters that exist (`admin` scope)
    may_move_aliases: bool  # point aliases at versions (`admin` scope)

    @classmethod
    def of_key(cls, principal: Principal) -> JobRights:
        """The rights of an API key: those its scopes give through the adapter routes."""
        admin = principal.has_scope(Scope.ADMIN)
        return cls(may_write_adapters=admin, may_move_aliases=admin)


# The console's editors are tenant admins or operators (web/session.provide_editor).
TENANT_ADMIN = JobRights(may_write_adapters=True, may_move_aliases=True)
# What a caller that does not say gets: new adapters only, no alias.
LEAST = JobRights(may_write_adapters=False, may_move_aliases=False)


def refusal(
    rights: JobRights, suffix: str, adapter_exists: bool, alias: str | None
) -> Forbidden | None:
    """Why a job with these rights may not name this adapter or alias, or None."""
    if adapter_exists and not rights.may_write_adapters:
        return Forbidden(
            f"adapter '{suffix}' exists and this key may not add versions to it (that needs "
            "the 'admin' scope); choose a new suffix or use a key with the 'admin' scope",
            param="suffix",
        )
    if alias and not rights.may_move_aliases:
        return Forbidden(
            f"moving alias '{alias}' when the job succeeds needs the 'admin' scope, which "
            "this key lacks; leave out alias and promote the version with an admin key",
            param="alias",
        )
    return None


async def check_job_rights(
    session: AsyncSession, tenant_id: UUID, suffix: str, alias: str | None, rights: JobRights
) -> None:
    """403 naming the problem when the job would change what `rights` may not."""
    existing = await session.scalar(
        select(Adapter.id).where(Adapter.tenant_id == tenant_id, Adapter.name == suffix)
    )
    refused = refusal(rights, suffix, existing is not None, alias)
    if refused is not None:
        raise refused
