"""Console fixtures: users with passwords, and signing in the way a browser does."""

from __future__ import annotations

import re
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright

from loraplex.bench.server import api_process
from loraplex.control.bootstrap import create_operator, set_password
from loraplex.db.config import sqlalchemy_config
from loraplex.settings import Settings
from tests.conftest import Api, TenantHandle
from tests.integration.conftest import Served

PASSWORD = "correct horse battery"
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"
)


@pytest.fixture(scope="session")
def console_url(settings: Settings) -> Iterator[str]:
    """A real API process on the test database, serving the console (no engines)."""
    with api_process(settings.to_env()) as (url, _pid):
        yield url


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium (Debian's, driven by Playwright)."""
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        await chromium.close()


@dataclass
class ConsoleUser:
    """A user who can sign in to the console."""

    email: str
    password: str


@pytest.fixture
def make_user(operator: Api) -> Any:
    """Factory: a user of `tenant` with a password, made through the users API."""

    async def make(tenant: TenantHandle, role: str = "tenant_admin") -> ConsoleUser:
        email = f"u-{secrets.token_hex(4)}@example.com"
        body = {"email": email, "password": PASSWORD, "role": role}
        response = await operator.post(f"/api/v1/tenants/{tenant.id}/users", json=body)
        assert response.status_code == 201, response.text
        return ConsoleUser(email, PASSWORD)

    return make


@pytest.fixture
async def operator_user(settings: Settings) -> ConsoleUser:
    """An operator, made as `loraplex admin create-operator` and `set-password` make one."""
    email = f"ops-{secrets.token_hex(4)}@example.com"
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        await create_operator(session, email, "ops")
        await set_password(session, email, PASSWORD)
        await session.commit()
    await config.get_engine().dispose()
    return ConsoleUser(email, PASSWORD)


async def sign_in(client: Any, email: str, password: str) -> Any:
    """GET the form (which sets the CSRF cookie), then POST it as a browser would."""
    client.cookies.clear()
    assert (await client.get("/login")).status_code == 200
    form = {"email": email, "password": password, "_csrf_token": client.cookies["csrftoken"]}
    return await client.post("/login", data=form, follow_redirects=False)


def served_tenant_admin(served: Served, prefix: str) -> str:
    """A new tenant admin of the served tenant (the one owning the trained adapters); its email."""
    email = f"{prefix}-{secrets.token_hex(4)}@example.com"
    made = httpx.post(
        f"{served.url}/api/v1/tenants/{served.tenant_id}/users",
        json={"email": email, "password": PASSWORD, "role": "tenant_admin"},
        headers=served.operator(),
    )
    assert made.status_code == 201, made.text
    return email


async def sign_in_page(page: Page, url: str, email: str, password: str = PASSWORD) -> None:
    """Sign in through the form in the browser; returns on the landing page (console or admin)."""
    await page.goto(f"{url}/login")
    await page.fill("input[name=email]", email)
    await page.fill("input[name=password]", password)
    await page.click("button:has-text('Sign in')")
    await page.wait_for_url(re.compile(r"/(console|admin)$"))


def htmx(client: Any) -> dict[str, str]:
    """The headers htmx sends with a form post: its marker and the CSRF token."""
    return {"hx-request": "true", "x-csrftoken": client.cookies["csrftoken"]}


@pytest.fixture
async def browser_client(client: Any) -> Any:
    """The app's test client with its cookies cleared before and after (it is shared)."""
    client.cookies.clear()
    yield client
    client.cookies.clear()
