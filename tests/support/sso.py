"""A browser signing in to the console through the test OpenID Provider (oidc_provider.py).

The console runs in-process (Litestar's test client); the browser follows the redirects
between it and the provider and posts the provider's sign-in form, as a person's would.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import httpx
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.support.oidc_provider import OidcProviderProcess


@dataclass
class SsoBrowser:
    """One browser: the console's cookies in `console`, the provider's in `at_provider`."""

    console: AsyncTestClient[Litestar]
    at_provider: httpx.AsyncClient
    provider: OidcProviderProcess
    app_url: str  # the console's base URL, where the provider sends the browser back
    start_path: str = "/login/sso/corp"  # the console's link that starts a sign-in

    def new_account(self, *groups: str) -> tuple[str, str]:
        """An account at the provider in `groups`: its id (the sign-in login) and email."""
        account = f"user-{secrets.token_hex(4)}"
        email = f"{account}@corp.example"
        self.provider.put_account(account, email=email, email_verified=True, name=account,
                                  groups=list(groups))  # fmt: skip
        return account, email

    async def reach_callback(self, login: str) -> str:
        """Start a sign-in, sign in at the provider as `login`: the callback URL it sends back
        (not followed)."""
        response = await self.console.get(self.start_path, follow_redirects=False)
        assert response.status_code == 302, response.text
        url = response.headers["location"]
        while not url.startswith(self.app_url):
            response = await self.at_provider.get(url, follow_redirects=False)
            if response.status_code == 200:  # the provider's sign-in step
                response = await self.at_provider.post(f"{url}/login", data={"login": login})
            assert response.is_redirect, response.text
            url = str(response.url.join(response.headers["location"]))
        return url

    async def follow(self, callback: str) -> httpx.Response:
        """The console's answer to the provider's `callback` URL (redirects not followed)."""
        return await self.console.get(callback.removeprefix(self.app_url), follow_redirects=False)

    async def sign_in(self, login: str) -> httpx.Response:
        """The console's answer to the provider's callback for `login`."""
        return await self.follow(await self.reach_callback(login))

    async def sign_in_new(self, *groups: str) -> tuple[httpx.Response, str]:
        """Sign in a new account in `groups`: the console's answer, and the account's email."""
        account, email = self.new_account(*groups)
        return await self.sign_in(account), email
