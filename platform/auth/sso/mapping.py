"""Who an identity provider's user is in Loraplex: the policy, pure.

`decide_access(provider, claims)` takes an ID token's (or userinfo's) validated claims and
returns the tenant and role they map to, or raises `SignInRefused` saying why in words the
user can act on. It runs at sign-in and again at every session renewal, so a user whose
groups no longer map to a role loses access at the next renewal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loraplex.auth.sso.config import OidcProvider
from loraplex.db.models import UserRole
from loraplex.errors import Forbidden, InvalidInput, LoraplexError

# Claims come from a provider we trust to sign them, not to keep them small.
MAX_GROUPS = 500
MAX_GROUP_CHARS = 256
MAX_EMAIL_CHARS = 320
MAX_NAME_CHARS = 200
GROUPS_SHOWN = 5
RANK = {UserRole.TENANT_MEMBER: 1, UserRole.TENANT_ADMIN: 2, UserRole.OPERATOR: 3}


class SignInRefused(Forbidden):
    """The provider vouched for the user, but Loraplex's mapping gives them no access."""

    code = "sign_in_refused"


class SignInFailed(InvalidInput):
    """The sign-in could not be completed safely (state, code or token failed a check)."""

    code = "sign_in_failed"


class ProviderUnavailable(LoraplexError):
    """The identity provider did not answer (or answered with a server error)."""

    status_code = 503
    code = "identity_provider_unavailable"


@dataclass(frozen=True, slots=True)
class Identity:
    """The claims Loraplex uses, bounded."""

    subject: str
    email: str
    email_verified: bool
    name: str
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Access:
    """What an identity maps to: a tenant (by slug; None for an operator) and a role."""

    tenant_slug: str | None
    role: UserRole


def identity_of(provider: OidcProvider, claims: dict[str, Any]) -> Identity:
    """The bounded identity in `claims`; SignInFailed when a claim has the wrong shape."""
    subject, email = claims.get("sub"), claims.get("email")
    if not isinstance(subject, str) or not 0 < len(subject) <= 255:
        raise SignInFailed("the identity provider sent no usable subject")
    if not isinstance(email, str) or not 3 <= len(email) <= MAX_EMAIL_CHARS or "@" not in email:
        raise SignInFailed("the identity provider sent no email address (scope 'email')")
    raw_groups = claims.get(provider.groups_claim, [])
    if isinstance(raw_groups, str):
        raw_groups = [raw_groups]
    if not isinstance(raw_groups, list) or len(raw_groups) > MAX_GROUPS:
        raise SignInFailed(f"the '{provider.groups_claim}' claim is not a list of groups")
    groups = tuple(g for g in raw_groups if isinstance(g, str) and len(g) <= MAX_GROUP_CHARS)
    name = claims.get("name") if isinstance(claims.get("name"), str) else ""
    return Identity(
        subject=subject,
        email=email.strip().lower(),
        email_verified=claims.get("email_verified") is True,
        name=str(name)[:MAX_NAME_CHARS],
        groups=groups,
    )


def decide_access(provider: OidcProvider, identity: Identity) -> Access:
    """The tenant and role `identity` maps to under `provider`'s configuration."""
    role = _role(provider, identity)
    if role == UserRole.OPERATOR:
        return Access(None, role)
    return Access(_tenant_slug(provider, identity), role)


def _role(provider: OidcProvider, identity: Identity) -> UserRole:
    roles = [UserRole(provider.roles[g]) for g in identity.groups if g in provider.roles]
    if roles:
        return max(roles, key=RANK.__getitem__)
    shown = ", ".join(identity.groups[:GROUPS_SHOWN]) or "none"
    more = " …" if len(identity.groups) > GROUPS_SHOWN else ""
    raise SignInRefused(
        f"your account at {provider.button_label} is in no group that gives access to "
        f"Loraplex (your groups: {shown}{more}). Ask your administrator to add you to one."
    )


def _tenant_slug(provider: OidcProvider, identity: Identity) -> str:
    domain = identity.email.rpartition("@")[2]
    if domain in provider.email_domains:
        if not identity.email_verified:  # else anyone could claim a domain's address
            raise SignInRefused(
                f"{provider.button_label} has not verified your email address, which decides "
                "your organisation; verify it there and sign in again"
            )
        return provider.email_domains[domain]
    if provider.tenant:
        return provider.tenant
    raise SignInRefused(
        f"no organisation in Loraplex takes sign-ins from {domain} through "
        f"{provider.button_label}; ask your administrator"
    )
