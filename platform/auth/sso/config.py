"""Identity providers as an operator configures them (`LORAPLEX_OIDC_PROVIDERS`).

The setting is a JSON list, one object per provider:

    [{"name": "acme", "label": "Acme SSO", "issuer": "https://id.acme.example",
      "client_id": "loraplex", "tenant": "acme", "email_domains": {"acme.example": "acme"},
      "roles": {"loraplex-admins": "tenant_admin", "loraplex-users": "tenant_member"}}]

The client secret is read, in this order, from `LORAPLEX_OIDC_SECRET_<NAME>` (the name in
upper case, `-` as `_`), from the file named by `client_secret_file` (a mounted Secret), or
from `client_secret` in the JSON. A bad entry stops the process at start, naming the entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
SECRET_ENV_PREFIX = "LORAPLEX_OIDC_SECRET_"
DEFAULT_SCOPES = "openid email profile"


class ProviderConfigError(ValueError):
    """An identity provider entry an operator must fix."""


@dataclass(frozen=True, slots=True)
class OidcProvider:
    """One identity provider: where it is, how Loraplex is registered there, and how its
    users map to a tenant and a role."""

    name: str  # in URLs: /login/sso/<name>
    issuer: str
    client_id: str
    client_secret: str = field(default="", repr=False)
    label: str = ""  # the sign-in button says "Sign in with <label>"
    scopes: str = DEFAULT_SCOPES
    # Every user of this provider joins this tenant (slug), unless their email's domain is
    # listed in `email_domains`, which maps a verified email's domain to a tenant slug.
    tenant: str = ""
    email_domains: dict[str, str] = field(default_factory=dict)
    groups_claim: str = "groups"
    roles: dict[str, str] = field(default_factory=dict)  # group -> role; the highest wins

    @property
    def button_label(self) -> str:
        """What the sign-in page calls this provider."""
        return self.label or self.name

    @property
    def discovery_url(self) -> str:
        """The provider's OpenID configuration document."""
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def providers_from_json(raw: str, env: Mapping[str, str]) -> tuple[OidcProvider, ...]:
    """Parse and check the setting; secrets from `env`, files or the JSON, in that order."""
    entries = json.loads(raw or "[]")
    if not isinstance(entries, list):
        raise ProviderConfigError("a JSON list of identity providers is expected")
    providers = tuple(_provider(entry, env) for entry in entries)
    names = [p.name for p in providers]
    if len(set(names)) != len(names):
        raise ProviderConfigError("two identity providers have the same name")
    return providers


def providers_to_json(providers: tuple[OidcProvider, ...]) -> str:
    """The setting's value for these providers (secrets inline: for a child process's env)."""
    return json.dumps([asdict(p) for p in providers])


def _provider(entry: Any, env: Mapping[str, str]) -> OidcProvider:
    if not isinstance(entry, dict):
        raise ProviderConfigError("each identity provider is a JSON object")
    name = str(entry.get("name", ""))
    if not NAME_PATTERN.fullmatch(name):
        raise ProviderConfigError(f"provider name {name!r}: use a-z, 0-9 and -")
    secret_file = entry.pop("client_secret_file", "")
    try:
        provider = OidcProvider(**entry)
    except TypeError as exc:
        raise ProviderConfigError(f"provider {name}: {exc}") from exc
    secret = env.get(SECRET_ENV_PREFIX + name.upper().replace("-", "_"))
    if secret is None and secret_file:
        secret = Path(secret_file).read_text().strip()
    if secret is not None:
        provider = _replace_secret(provider, secret)
    _check(provider)
    return provider


def _replace_secret(provider: OidcProvider, secret: str) -> OidcProvider:
    values = asdict(provider)
    values["client_secret"] = secret
    return OidcProvider(**values)


def _check(provider: OidcProvider) -> None:
    where = f"provider {provider.name}"
    issuer = urlsplit(provider.issuer)
    plain_ok = issuer.scheme == "http" and issuer.hostname in LOOPBACK_HOSTS
    if issuer.scheme != "https" and not plain_ok:
        raise ProviderConfigError(f"{where}: the issuer must be an https:// URL")
    if not provider.client_id or not provider.client_secret:
        raise ProviderConfigError(
            f"{where}: set client_id, and the secret in "
            f"{SECRET_ENV_PREFIX}{provider.name.upper().replace('-', '_')} or client_secret_file"
        )
    if "openid" not in provider.scopes.split():
        raise ProviderConfigError(f"{where}: scopes must include openid")
    from loraplex.db.models.users import UserRole  # settings load without the ORM

    known = {role.value for role in UserRole}
    for group, role in provider.roles.items():
        if role not in known:
            raise ProviderConfigError(f"{where}: group {group!r} maps to unknown role {role!r}")
    if not provider.roles:
        raise ProviderConfigError(f"{where}: map at least one group to a role in roles")
