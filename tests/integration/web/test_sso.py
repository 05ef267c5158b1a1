"""Single sign-on against a real OpenID Provider (`oidc-provider` under Node, on loopback).

The console runs in-process; the browser is an HTTP client that follows the redirects
between the two and posts the provider's sign-in form. Each test signs in a new account.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import select

from loraplex.api.deps import services_of
from loraplex.app import create_app
from loraplex.auth.sso.config import OidcProvider
from loraplex.auth.sso.service import SsoSession
from loraplex.cli import main
from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import User
from loraplex.settings import Settings
from tests.conftest import Api
from tests.support.hygiene import check_error_body
from tests.support.oidc_provider import INSTALLED, NODE, OidcProviderProcess
from tests.support.s3_server import free_port
from tests.support.sso import SsoBrowser

pytestmark = pytest.mark.skipif(
    NODE is None or not INSTALLED, reason="node or the test provider's packages (`make oidc`)"
)
APP = "http://testserver.local"
ADMINS, MEMBERS = "loraplex-admins", "loraplex-members"


@pytest.fixture(scope="session")
def provider() -> Iterator[OidcProviderProcess]:
    """The OpenID Provider, started once for the session."""
    with OidcProviderProcess(f"{APP}/login/sso/corp/callback") as process:
        yield process


@pytest.fixture(scope="module")
async def sso_tenant(operator: Api) -> dict[str, Any]:
    """The tenant the provider's users join."""
    slug = f"sso-{secrets.token_hex(4)}"
    response = await operator.post("/api/v1/tenants", json={"slug": slug, "name": slug})
    assert response.status_code == 201, response.text
    return dict(response.json())


@pytest.fixture(scope="module")
async def console(
    settings: Settings, provider: OidcProviderProcess, sso_tenant: dict[str, Any]
) -> AsyncIterator[AsyncTestClient[Litestar]]:
    """The console with the provider configured; every request renews an SSO session."""
    corp = OidcProvider(
        name="corp",
        label="Corp ID",
        issuer=provider.issuer,
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        scopes="openid email profile groups",
        tenant=sso_tenant["slug"],
        roles={ADMINS: "tenant_admin", MEMBERS: "tenant_member"},
    )
    gone = dataclasses.replace(corp, name="gone", label="Gone ID",
                               issuer=f"http://127.0.0.1:{free_port()}")  # fmt: skip
    sso_settings = dataclasses.replace(settings, oidc_providers=(corp, gone), oidc_recheck_s=0.0)
    async with AsyncTestClient(app=create_app(sso_settings), base_url=APP) as client:
        client.event_hooks = {"request": [], "response": [check_error_body]}
        yield client


@pytest.fixture
async def browser(
    console: AsyncTestClient[Litestar], provider: OidcProviderProcess
) -> AsyncIterator[SsoBrowser]:
    """A fresh browser: no console cookies, and its own cookie jar at the provider."""
    console.cookies.clear()
    async with httpx.AsyncClient(timeout=10) as at_provider:
        yield SsoBrowser(console, at_provider, provider, APP)


async def user_of(operator: Api, tenant: dict[str, Any], email: str) -> dict[str, Any] | None:
    """The tenant's user with `email`, as the API shows it."""
    response = await operator.get(f"/api/v1/tenants/{tenant['id']}/users", params={"limit": 100})
    return next((u for u in response.json()["items"] if u["email"] == email), None)


async def test_the_sign_in_page_offers_the_provider(console: AsyncTestClient[Litestar]) -> None:
    page = await console.get("/login")
    assert 'href="/login/sso/corp">Sign in with Corp ID</a>' in page.text


async def test_a_provider_that_does_not_answer_gets_a_page_saying_so(
    console: AsyncTestClient[Litestar],
) -> None:
    answer = await console.get("/login/sso/gone", follow_redirects=False)
    assert answer.status_code == 503
    assert "Gone ID did not answer; try again shortly" in answer.text


async def test_a_first_sign_in_creates_the_user_with_their_groups_role(
    browser: SsoBrowser, operator: Api, sso_tenant: dict[str, Any]
) -> None:
    answer, email = await browser.sign_in_new("everyone", ADMINS)
    assert (answer.status_code, answer.headers["location"]) == (303, "/console")
    assert (await browser.console.get("/console", follow_redirects=False)).status_code == 200
    user = await user_of(operator, sso_tenant, email)
    assert user is not None and user["role"] == "tenant_admin" and user["is_active"]
    users_page = await browser.console.get("/console/users")
    assert f'<tr data-user="{email}">' in users_page.text
    assert "<td>corp</td>" in users_page.text  # signs in with the provider, not a password


async def test_an_id_token_for_another_audience_is_refused(
    browser: SsoBrowser, operator: Api, sso_tenant: dict[str, Any]
) -> None:
    browser.provider.tamper_next_id_token(claims={"aud": "some-other-app"})
    answer, email = await browser.sign_in_new(MEMBERS)
    assert answer.status_code == 400
    assert "failed its audience check" in answer.text
    assert await user_of(operator, sso_tenant, email) is None


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"expired": True}, "expiry"),
        ({"foreign_key": True}, "signature"),
        ({"claims": {"iss": "https://impostor.example"}}, "issuer"),
        ({"claims": {"nonce": "from-another-sign-in"}}, "nonce"),
    ],
    ids=["expired", "unpublished-key", "other-issuer", "other-nonce"],
)
async def test_an_id_token_failing_a_check_is_refused_naming_it(
    browser: SsoBrowser, change: dict[str, Any], check: str
) -> None:
    browser.provider.tamper_next_id_token(**change)
    answer, _email = await browser.sign_in_new(MEMBERS)
    assert answer.status_code == 400
    assert f"failed its {check} check" in answer.text


async def test_a_replayed_state_is_refused(browser: SsoBrowser) -> None:
    account, _email = browser.new_account(MEMBERS)
    callback = await browser.reach_callback(account)
    cookies_before = httpx.Cookies(browser.console.cookies)
    assert (await browser.follow(callback)).status_code == 303
    browser.console.cookies = cookies_before  # the same browser state, the same URL, again
    again = await browser.follow(callback)
    assert again.status_code == 400
    assert "already used" in again.text


async def test_a_callback_in_another_browser_is_refused(browser: SsoBrowser) -> None:
    account, _email = browser.new_account(MEMBERS)
    callback = await browser.reach_callback(account)
    browser.console.cookies.clear()  # an attacker's browser, handed the victim's callback URL
    answer = await browser.follow(callback)
    assert answer.status_code == 400
    assert "began in another browser" in answer.text


async def test_a_user_in_no_mapped_group_gets_a_page_saying_so(
    browser: SsoBrowser, operator: Api, sso_tenant: dict[str, Any]
) -> None:
    answer, email = await browser.sign_in_new("contractors")
    assert answer.status_code == 403
    assert "in no group that gives access" in answer.text and "contractors" in answer.text
    assert await user_of(operator, sso_tenant, email) is None


async def test_a_user_the_provider_forgot_loses_access_at_renewal(
    browser: SsoBrowser, operator: Api, sso_tenant: dict[str, Any]
) -> None:
    account, email = browser.new_account(MEMBERS)
    assert (await browser.sign_in(account)).status_code == 303
    assert (await browser.console.get("/console", follow_redirects=False)).status_code == 200
    browser.provider.forget_account(account)
    renewal = await browser.console.get("/console", follow_redirects=False)
    assert (renewal.status_code, renewal.headers["location"]) == (302, "/login")
    assert "Corp ID no longer gives you access" in (await browser.console.get("/login")).text
    user = await user_of(operator, sso_tenant, email)
    assert user is not None and not user["is_active"]


async def test_renewals_at_once_spend_the_rotating_refresh_token_once(
    browser: SsoBrowser, settings: Settings
) -> None:
    answer, email = await browser.sign_in_new(MEMBERS)
    assert answer.status_code == 303
    sso = services_of(browser.console.app).sso
    # The in-process client serves one request at a time: four renewals at once, as four
    # requests of the user's browsers would make them, go straight to the service.
    config = sqlalchemy_config(settings)

    async def renew() -> SsoSession:
        async with config.get_session() as db:
            user = await db.scalar(select(User).where(User.email == email))
            assert user is not None
            return await sso.renew(db, user, SsoSession("corp", 0.0))

    try:
        await asyncio.gather(*(renew() for _ in range(4)))
    finally:
        await config.get_engine().dispose()
    assert (await browser.console.get("/console", follow_redirects=False)).status_code == 200


async def test_a_user_moved_out_of_every_group_loses_access_at_renewal(
    browser: SsoBrowser,
) -> None:
    account, email = browser.new_account(ADMINS)
    assert (await browser.sign_in(account)).status_code == 303
    browser.provider.put_account(account, email=email, email_verified=True, groups=["alumni"])
    renewal = await browser.console.get("/console", follow_redirects=False)
    assert (renewal.status_code, renewal.headers["location"]) == (302, "/login")


def test_sso_check_reaches_the_provider_and_names_the_redirect_uri(
    provider: OidcProviderProcess, sso_tenant: dict[str, Any]
) -> None:
    entry = {"name": "corp", "issuer": provider.issuer, "client_id": provider.client_id,
             "tenant": sso_tenant["slug"], "roles": {ADMINS: "tenant_admin"}}  # fmt: skip
    env = {
        "LORAPLEX_OIDC_PROVIDERS": json.dumps([entry]),
        "LORAPLEX_OIDC_SECRET_CORP": provider.client_secret,
        "LORAPLEX_PUBLIC_URL": "https://console.corp.example",
    }
    result = CliRunner().invoke(main, ["sso", "check"], env=env)
    assert result.exit_code == 0, result.output
    assert "corp: ok" in result.output
    assert "https://console.corp.example/login/sso/corp/callback" in result.output
