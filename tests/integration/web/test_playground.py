"""The playground: a chat typed in the console runs exactly as the same request on `/v1`
(real vLLM engine, the tenant's adapter), streamed into the page as it is generated."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.async_api import async_playwright, expect

from tests.integration.conftest import Served
from tests.integration.web.conftest import PASSWORD

CHROMIUM = shutil.which("chromium")
REQUEST = {
    "messages": [{"role": "user", "content": "Once upon a time"}],
    "max_tokens": 24,
    "temperature": 0,
}


@dataclass
class Console:
    """A browser-like client of the served API process, signed in as `email`."""

    client: httpx.Client
    email: str

    def csrf(self) -> dict[str, str]:
        """The headers the playground's script sends: the CSRF token and htmx's marker."""
        return {"x-csrftoken": self.client.cookies["csrftoken"], "hx-request": "true"}


@pytest.fixture(scope="module")
def console(served: Served) -> Iterator[Console]:
    """A tenant admin of the served tenant, signed in."""
    email = f"play-{secrets.token_hex(4)}@example.com"
    made = httpx.post(
        f"{served.url}/api/v1/tenants/{served.tenant_id}/users",
        json={"email": email, "password": PASSWORD, "role": "tenant_admin"},
        headers=served.operator(),
    )
    assert made.status_code == 201, made.text
    with httpx.Client(base_url=served.url, timeout=60) as client:
        client.get("/login")
        form = {"email": email, "password": PASSWORD, "_csrf_token": client.cookies["csrftoken"]}
        assert client.post("/login", data=form).headers["location"] == "/console"
        yield Console(client, email)


def _api_answer(served: Served, model: str) -> str:
    response = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": model, **REQUEST},
        headers=served.headers(),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def test_the_playground_streams_what_the_api_answers(served: Served, console: Console) -> None:
    model = served.adapters[8][0]
    body = {"model": model, **REQUEST, "stream": True, "stream_options": {"include_usage": True}}
    text, usage = "", None
    with console.client.stream(
        "POST", "/console/playground/chat", json=body, headers=console.csrf()
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                if chunk["choices"]:
                    text += chunk["choices"][0]["delta"].get("content") or ""
    assert text and text == _api_answer(served, model)
    assert usage and usage["completion_tokens"] > 0


def test_an_unknown_model_in_the_playground_is_a_404_message(console: Console) -> None:
    reply = console.client.post(
        "/console/playground/chat",
        json={"model": "no-such-adapter", **REQUEST, "stream": True},
        headers=console.csrf(),
    )
    assert reply.status_code == 404 and "no-such-adapter" in reply.text


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
async def test_the_playground_shows_the_answer_in_chromium(
    served: Served, console: Console
) -> None:
    model = served.adapters[16][0]
    expected = _api_answer(served, model)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM)
        page = await browser.new_page()
        await page.goto(f"{served.url}/login")
        await page.fill("input[name=email]", console.email)
        await page.fill("input[name=password]", PASSWORD)
        await page.click("button:has-text('Sign in')")
        await page.click("text=Playground")
        await page.select_option("select[name=model]", model)
        await page.fill("input[name=max_tokens]", str(REQUEST["max_tokens"]))
        await page.click("button:has-text('Send')")
        await expect(page.locator("#answer[data-done=true]")).to_be_attached(timeout=60_000)
        assert await page.locator("#answer").inner_text() == expected
        await expect(page.locator("#stats")).to_contain_text("completion tokens")
        if shots := os.environ.get("LORAPLEX_SCREENSHOTS"):  # for a person to look at
            await page.screenshot(path=f"{shots}/playground.png", full_page=True)
        await browser.close()
