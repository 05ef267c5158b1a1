"""`loraplex sso check`: what an operator runs after configuring identity providers."""

from __future__ import annotations

import asyncio

import click

from loraplex.auth.sso.client import OidcClient
from loraplex.auth.sso.config import OidcProvider
from loraplex.errors import LoraplexError
from loraplex.settings import Settings


@click.group("sso")
def sso() -> None:
    """Single sign-on: the console's OpenID Connect providers (docs/sso.md)."""


@sso.command("check")
@click.pass_obj
def check(settings: Settings) -> None:
    """Reach every configured provider and print what to register there; exit 1 if one fails."""
    if not settings.oidc_providers:
        raise click.ClickException("no providers: set LORAPLEX_OIDC_PROVIDERS (docs/sso.md)")
    base = settings.public_url.rstrip("/") or "https://<console host>"
    failed = 0
    for provider in settings.oidc_providers:
        try:
            keys = asyncio.run(OidcClient(provider).check())
        except LoraplexError as exc:
            failed += 1
            click.echo(f"{provider.name}: FAILED: {exc.detail} (the log says why)")
            continue
        click.echo(f"{provider.name}: ok, {provider.issuer} publishes {keys} signing key(s)")
        click.echo(f"  redirect URI to register: {base}/login/sso/{provider.name}/callback")
        click.echo(f"  {_mapping(provider)}")
    if failed:
        raise SystemExit(1)


def _mapping(provider: OidcProvider) -> str:
    domains = ", ".join(f"{d} -> {t}" for d, t in provider.email_domains.items())
    roles = ", ".join(f"{g} -> {r}" for g, r in provider.roles.items())
    tenant = provider.tenant or "(none: email domains only)"
    return f"tenant {tenant}; email domains: {domains or 'none'}; groups: {roles}"
