"""How the playground ends a reply, in Chromium: a stream that closes without `[DONE]` is an
error, and Stop ends the replies in flight; neither turn is sent again as history, and the
conversation stays. The chat route is answered by the test (Playwright's routing), so these
run without engines."""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import Browser, Page, Route, expect

from tests.integration.web.conftest import needs_chromium, sign_in_page

pytestmark = needs_chromium
CHAT = "**/console/playground/chat"
REPLY = 'data: {"choices": [{"index": 0, "delta": {"content": "Hello"}}]}\n\n'
DONE = "data: [DONE]\n\n"


class FakeChat:
    """Answers the playground's chat requests from a script; keeps what each one sent."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)  # None: never answered (a reply still streaming)
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, route: Route) -> None:
        self.sent.append(json.loads(route.request.post_data or "{}"))
        answer = self.answers.pop(0)
        if answer is not None:
            await route.fulfill(status=200, content_type="text/event-stream", body=answer)


async def _playground(browser: Browser, url: str, user: Any, chat: FakeChat) -> Page:
    page = await browser.new_page()
    await sign_in_page(page, url, user.email)
    await page.route(CHAT, chat)
    await page.goto(f"{url}/console/playground?model=some-model")
    return page


async def _send(page: Page, text: str) -> None:
    await page.get_by_label("Message", exact=True).fill(text)
    await page.get_by_role("button", name="Send").click()


async def test_a_stream_that_ends_without_done_is_shown_as_an_error_and_not_resent(
    browser: Browser, console_url: str, make_tenant, make_user
) -> None:
    chat = FakeChat(REPLY, REPLY + DONE)
    page = await _playground(browser, console_url, await make_user(await make_tenant()), chat)
    replies = page.locator("[data-column=a] [data-reply]")

    await _send(page, "first")
    await expect(replies.nth(0)).to_have_attribute("data-done", "error")
    await expect(page.locator(".reply-error")).to_have_text("the stream ended early")
    await _send(page, "second")
    await expect(replies.nth(1)).to_have_attribute("data-done", "true")

    assert chat.sent[1]["messages"] == [{"role": "user", "content": "second"}]


async def test_stop_ends_the_reply_in_flight_and_keeps_the_conversation(
    browser: Browser, console_url: str, make_tenant, make_user
) -> None:
    chat = FakeChat(REPLY + DONE, None, REPLY + DONE)
    page = await _playground(browser, console_url, await make_user(await make_tenant()), chat)
    replies = page.locator("[data-column=a] [data-reply]")
    stop = page.get_by_role("button", name="Stop the replies")
    await expect(stop).to_be_disabled()  # nothing to stop yet

    await _send(page, "one")
    await expect(replies.nth(0)).to_have_attribute("data-done", "true")
    await _send(page, "two")
    await expect(stop).to_be_enabled()
    await stop.click()
    await expect(replies.nth(1)).to_have_attribute("data-done", "stopped")
    await expect(page.locator(".reply-stopped")).to_have_text("stopped")
    await expect(replies.nth(0)).to_have_text("Hello")  # the conversation stays
    await _send(page, "three")
    await expect(replies.nth(2)).to_have_attribute("data-done", "true")

    assert chat.sent[2]["messages"] == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "three"},
    ]
