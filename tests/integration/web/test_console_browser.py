"""The console in a real browser: Debian's Chromium, driven by Playwright, against a real
`loraplex api` process. Proves the parts HTTP tests cannot: htmx loads from npm's copy, forms
swap their fragments in place, the CSRF header rides along, confirm dialogs gate revokes."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.async_api import Browser, expect

from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, needs_chromium, sign_in_page
from tests.support.adapter_api import adapter_with_versions
from tests.support.lora_files import TINY_BASE, write_adapter

pytestmark = needs_chromium


async def test_a_tenant_admin_makes_and_revokes_a_key_and_moves_an_alias_in_chromium(
    browser: Browser, console_url: str, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    user = await make_user(tenant)
    page = await browser.new_page()
    await sign_in_page(page, console_url, user.email)
    await expect(page.locator("[data-meter=Adapters] .meter-value")).to_contain_text("1 / ")

    # A key: its secret appears once, works, and stops working when revoked.
    await page.click("text=API keys")
    await page.fill("input[name=name]", "laptop")
    await page.click("button:has-text('Create key')")
    secret = await page.locator("[data-secret]").inner_text()
    models, auth = f"{console_url}/v1/models", {"Authorization": f"Bearer {secret}"}
    assert httpx.get(models, headers=auth).status_code == 200  # "inference" is checked by default
    row = page.locator("tr", has_text="laptop")
    page.once("dialog", lambda dialog: dialog.accept())
    await row.locator("button:has-text('Revoke')").click()
    await expect(page.locator("tr.revoked", has_text="laptop")).to_be_visible()
    assert httpx.get(models, headers=auth).status_code == 401
    await page.reload()
    assert await page.locator("[data-secret]").count() == 0

    # A new adapter and its first version, uploaded from the page.
    await page.click("text=Adapters")
    await page.fill("input[name=name]", "web-made")
    await page.select_option("select[name=base_model]", TINY_BASE.name)  # what it was made for
    await page.click("button:has-text('Create')")
    made = page.locator("[data-adapter='web-made']")
    folder = write_adapter(tmp_path / "upload", rank=8)
    files = [str(folder / "adapter_config.json"), str(folder / "adapter_model.safetensors")]
    await made.locator("form.upload input[type=file]").set_input_files(files)
    await made.locator("form.upload button").click()
    await expect(made.locator("tr[data-version='1']")).to_contain_text("ready")

    # An alias: point it, promote it, roll it back; a bad name is explained in place.
    await page.click("text=Adapters")
    await page.click(f"a:has-text('{adapter}')")
    card = page.locator(f"[data-adapter='{adapter}']")
    points_to = card.locator("tr[data-alias=prod] [data-points-to]")
    for version in ("1", "2"):
        await card.locator("form.promote select[name=version]").select_option(version)
        await card.locator("form.promote button").click()
        await expect(points_to).to_have_text(f"v{version}")
    await card.locator("button:has-text('Roll back to v1')").click()
    await expect(points_to).to_have_text("v1")
    await card.locator("form.promote input[name=alias]").fill("Bad!")
    await card.locator("form.promote button").click()
    await expect(page.locator("#flash .error")).to_contain_text("must start with a-z")

    # Pin the alias (htmx sends the button's value), archive the version it left behind.
    prod = card.locator("tr[data-alias=prod]")
    await prod.locator("button:has-text('Pin')").click()
    await expect(prod.locator("[data-pinned]")).to_have_text("yes")
    page.once("dialog", lambda dialog: dialog.accept())
    await card.locator("tr[data-version='2'] button:has-text('Archive')").click()
    await expect(card.locator("tr[data-version='2'] [data-status]")).to_have_text("archived")


async def test_a_user_changes_their_password_in_chromium_and_signs_in_with_it(
    browser: Browser, console_url: str, make_tenant, make_user
) -> None:
    user = await make_user(await make_tenant())
    page = await browser.new_page()
    await sign_in_page(page, console_url, user.email)
    await page.click(f"text={user.email}")  # the header's link to your account
    await page.fill("input[name=current]", PASSWORD)
    await page.fill("input[name=new]", "a newer passphrase")
    await page.fill("input[name=confirm]", "a newer passphrase")
    await page.click("button:has-text('Change password')")
    await expect(page.locator("#password-form [role=status]")).to_contain_text("Password changed")
    await page.click("text=API keys")  # this session goes on
    await expect(page.locator("h1")).to_have_text("API keys")

    fresh = await browser.new_page()
    await sign_in_page(fresh, console_url, user.email, "a newer passphrase")
