"""The playground: a chat typed in the console runs exactly as the same request on `/v1`
(real SGLang engine, the tenant's adapter), streamed into the page as it is generated; a
multi-turn chat sends the whole conversation each turn, and compare mode sends each turn to
two models whose replies stream side by side."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, Request, expect

from tests.integration.conftest import Served
from tests.integration.web.conftest import (
    PASSWORD,
    needs_chromium,
    served_tenant_admin,
    sign_in_page,
)
from tests.support.screens import screenshot_both

MAX_TOKENS = 16
REQUEST = {
    "messages": [{"role": "user", "content": "Once upon a time"}],
    "max_tokens": 24,
    "temperature": 0,
}
SYSTEM = "You are a storyteller."
USER_TURNS = ["Once upon a time", "What happened next?", "And how did it end?"]
DONE = "[data-reply][data-done=true]"


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
    email = served_tenant_admin(served, "play")
    with httpx.Client(base_url=served.url, timeout=60) as client:
        client.get("/login")
        form = {"email": email, "password": PASSWORD, "_csrf_token": client.cookies["csrftoken"]}
        assert client.post("/login", data=form).headers["location"] == "/console"
        yield Console(client, email)


def _api_answer(served: Served, model: str, **request: Any) -> str:
    """What `/v1/chat/completions` answers (not streamed) for `model` and `request`."""
    response = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": model, **(request or REQUEST)},
        headers=served.headers(),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


async def _signed_in_page(browser: Browser, served: Served, console: Console) -> Page:
    page = await browser.new_page()
    await sign_in_page(page, served.url, console.email)
    return page


async def _reply_texts(page: Page, column: str) -> list[str]:
    """The replies of one column, in order, exactly as streamed in."""
    replies = page.locator(f"[data-column={column}] [data-reply]")
    return [await reply.text_content() or "" for reply in await replies.all()]


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


@needs_chromium
async def test_the_playground_shows_the_answer_in_chromium(
    browser: Browser, served: Served, console: Console
) -> None:
    model = served.adapters[16][0]
    expected = _api_answer(served, model)
    page = await _signed_in_page(browser, served, console)
    await page.click("text=Playground")
    await page.select_option("select[name=model]", model)
    await page.fill("input[name=max_tokens]", str(REQUEST["max_tokens"]))
    await page.fill("textarea[name=message]", "Once upon a time")
    await page.click("button:has-text('Send')")
    await expect(page.locator(f"[data-column=a] {DONE}")).to_have_count(1, timeout=60_000)
    assert await _reply_texts(page, "a") == [expected]
    await expect(page.locator("[data-column=a] [data-stats]")).to_contain_text("tokens/s")


@needs_chromium
async def test_each_turn_of_a_chat_sends_the_whole_conversation_in_chromium(
    browser: Browser, served: Served, console: Console
) -> None:
    model = served.adapters[8][0]
    page = await _signed_in_page(browser, served, console)
    sent: list[dict[str, Any]] = []

    def capture(request: Request) -> None:
        if request.url.endswith("/console/playground/chat"):
            sent.append(request.post_data_json)

    page.on("request", capture)
    await page.goto(f"{served.url}/console/playground?model={model}")
    await page.get_by_label("System prompt").fill(SYSTEM)
    await page.get_by_label("max_tokens").fill(str(MAX_TOKENS))
    message = page.get_by_label("Message")
    for turn, text in enumerate(USER_TURNS, start=1):
        await message.fill(text)
        await message.press("Control+Enter")  # the hint's shortcut; plain Enter is a newline
        await expect(page.locator(f"[data-column=a] {DONE}")).to_have_count(turn, timeout=60_000)

    answers = await _reply_texts(page, "a")
    third = sent[2]["messages"]
    assert third == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER_TURNS[0]},
        {"role": "assistant", "content": answers[0]},
        {"role": "user", "content": USER_TURNS[1]},
        {"role": "assistant", "content": answers[1]},
        {"role": "user", "content": USER_TURNS[2]},
    ]
    replies = page.locator("[data-column=a] [data-reply]")
    first_prompt = await replies.nth(0).get_attribute("data-prompt-tokens")
    third_prompt = await replies.nth(2).get_attribute("data-prompt-tokens")
    assert int(third_prompt or 0) > int(first_prompt or 0)  # the gateway got the history
    assert answers[2] == _api_answer(
        served, model, messages=third, max_tokens=MAX_TOKENS, temperature=0
    )
    # Scrolled down (the message box has focus), Chromium's full-page shot after a resize
    # leaves the bottom of the page unpainted; from the top it is whole.
    await page.evaluate("window.scrollTo(0, 0)")
    await screenshot_both(page, "playground")


@needs_chromium
async def test_compare_mode_streams_two_models_side_by_side_in_chromium(
    browser: Browser, served: Served, console: Console
) -> None:
    first, second = served.adapters[8][0], served.adapters[16][0]
    page = await _signed_in_page(browser, served, console)
    await page.click("text=Playground")
    await page.get_by_label("Compare with a second model").check()
    await page.get_by_label("Model", exact=True).select_option(first)
    await page.get_by_label("Second model", exact=True).select_option(second)
    await page.get_by_label("max_tokens").fill(str(MAX_TOKENS))
    await page.get_by_label("Message").fill(USER_TURNS[0])
    await page.click("button:has-text('Send')")
    for column in ("a", "b"):
        await expect(page.locator(f"[data-column={column}] {DONE}")).to_have_count(
            1, timeout=60_000
        )

    request = {
        "messages": [{"role": "user", "content": USER_TURNS[0]}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    [answer_a], [answer_b] = await _reply_texts(page, "a"), await _reply_texts(page, "b")
    assert answer_a == _api_answer(served, first, **request)
    assert answer_b == _api_answer(served, second, **request)
    assert answer_a != answer_b
    await expect(page.locator("[data-column=b] [data-stats]")).to_contain_text("TTFT")
    await screenshot_both(page, "playground-compare")


@needs_chromium
async def test_a_link_opens_compare_mode_with_both_models_chosen(
    browser: Browser, served: Served, console: Console
) -> None:
    canary, unknown = f"{served.adapters[8][0]}@v1", "support@prod"
    page = await _signed_in_page(browser, served, console)
    await page.goto(f"{served.url}/console/playground?model={canary}&compare={unknown}")
    await expect(page.get_by_label("Compare with a second model")).to_be_checked()
    await expect(page.get_by_label("Model", exact=True)).to_have_value(canary)
    await expect(page.get_by_label("Second model", exact=True)).to_have_value(unknown)
    await expect(page.locator("[data-column=b]")).to_be_visible()

    # A model the gateway does not serve answers with its 404 message, in its own column.
    await page.get_by_label("Message").fill("Hello")
    await page.click("button:has-text('Send')")
    error = page.locator("[data-column=b] [data-reply][data-done=error]")
    await expect(error).to_have_count(1, timeout=60_000)
    await expect(page.locator("[data-column=b] .reply-error")).to_contain_text("404")
    await expect(page.locator("[data-column=b] .reply-error")).to_contain_text(unknown)
    await expect(page.locator(f"[data-column=a] {DONE}")).to_have_count(1, timeout=60_000)
