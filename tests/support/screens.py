"""Screenshots of console pages at a laptop's and a phone's width, for a person to look at.

Browser tests call `screenshot_both(page, name)` at the moment worth seeing. It writes
`<name>-laptop.png` and `<name>-phone.png` (full page) into the directory named by
`LORAPLEX_SCREENSHOTS`, and does nothing when that variable is unset (as in CI).
"""

from __future__ import annotations

import os
from pathlib import Path

from playwright.async_api import Page

LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


async def screenshot_both(page: Page, name: str) -> None:
    """Full-page screenshots of `page` at laptop and phone width; the laptop size is kept after."""
    folder = os.environ.get("LORAPLEX_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    for label, size in (("phone", PHONE), ("laptop", LAPTOP)):
        await page.set_viewport_size(size)
        await page.evaluate("window.scrollTo(0, 0)")  # else a scrolled page's shot ends blank
        await page.screenshot(path=f"{folder}/{name}-{label}.png", full_page=True)
