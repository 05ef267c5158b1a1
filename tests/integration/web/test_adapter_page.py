"""An adapter's console page and the adapters index: versions, aliases, where each version
is loaded (live, in Chromium against real SGLang engines), the canary slider, search and
paging, and another tenant's adapter as a 404."""

from __future__ import annotations

import re
import secrets
import uuid
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, Page, expect
from sqlalchemy import update

from loraplex.db.config import sqlalchemy_config
from loraplex.db.models import AdapterVersion
from loraplex.settings import Settings
from loraplex.web.adapter_reads import PAGE_SIZE
from tests.conftest import Api
from tests.integration.conftest import FILES, Served
from tests.integration.web.conftest import (
    PASSWORD,
    htmx,
    needs_chromium,
    served_tenant_admin,
    sign_in,
    sign_in_page,
)
from tests.support.adapter_api import adapter_with_versions, create_adapter, ensure_tiny_base
from tests.support.screens import screenshot_both


async def test_an_adapter_page_shows_its_versions_aliases_and_their_placement(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    aliases = f"/console/adapters/{adapter}/aliases"
    await browser_client.post(
        aliases, data={"alias": "prod", "version": 1}, headers=htmx(browser_client)
    )
    await browser_client.post(
        f"{aliases}/prod/canary", data={"version": 2, "weight": 20}, headers=htmx(browser_client)
    )

    page = await browser_client.get(f"/console/adapters/{adapter}")

    assert page.status_code == 200
    html = page.text
    assert 'data-version="1"' in html and 'data-version="2"' in html
    assert 'data-alias="prod"' in html and "v2 at 20%" in html
    assert "prod v1 80% · canary v2 20%" in html  # the slider's split, before any input
    assert f"/console/adapters/{adapter}/versions/2/files/adapter_model.safetensors" in html
    placement = html.split('id="placement"')[1]
    assert 'hx-trigger="every' in placement
    assert placement.count("data-best>cold<") == 2  # never requested: no engine has them


async def test_the_placement_fragment_answers_alone_for_polling(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    await sign_in(browser_client, (await make_user(tenant, "tenant_member")).email, PASSWORD)

    fragment = await browser_client.get(f"/console/adapters/{adapter}/placement")

    assert fragment.status_code == 200
    assert 'id="placement-live"' in fragment.text and "<html" not in fragment.text
    assert 'hx-trigger="every' in fragment.text  # and so it asks again


async def test_a_fine_tuned_version_links_to_the_job_that_made_it(
    browser_client, make_tenant, make_user, operator: Api, settings: Settings, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    job_id = uuid.uuid4()  # as workers/finish.py records the job on the version it stores
    config = sqlalchemy_config(settings)
    async with config.get_session() as session:
        await session.execute(
            update(AdapterVersion)
            .where(AdapterVersion.tenant_id == uuid.UUID(tenant.id))
            .values(job_id=job_id, source="fine_tune")
        )
        await session.commit()
    await config.get_engine().dispose()
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)

    page = await browser_client.get(f"/console/adapters/{adapter}")

    assert f'href="/console/fine-tunes/ftjob-{job_id.hex}"' in page.text


async def test_the_adapter_index_filters_by_what_is_searched(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    wanted = await create_adapter(tenant.api, tenant.id, "support-bot")
    other = await create_adapter(tenant.api, tenant.id, "sales-bot")
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)

    found = (await browser_client.get("/console/adapters", params={"q": "SUPPORT"})).text
    everything = (await browser_client.get("/console/adapters")).text
    nothing = (await browser_client.get("/console/adapters", params={"q": "100%_"})).text

    assert f'href="/console/adapters/{wanted}"' in found
    assert f'href="/console/adapters/{other}"' not in found
    assert all(f'href="/console/adapters/{name}"' in everything for name in (wanted, other))
    assert "No adapter matches" in nothing  # LIKE wildcards are taken literally


async def test_the_adapter_index_is_paged(
    browser_client, make_tenant, make_user, operator: Api
) -> None:
    tenant = await make_tenant()
    await ensure_tiny_base(operator)
    names = [
        await create_adapter(tenant.api, tenant.id, f"paged-{n:02d}") for n in range(PAGE_SIZE + 1)
    ]
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    index = lambda **params: browser_client.get("/console/adapters", params=params)  # noqa: E731

    first = (await index(q="paged")).text
    second = (await index(q="paged", page=2)).text
    past_the_end = (await index(q="paged", page=9)).text
    refused = await index(page=0)

    assert all(f'/console/adapters/{n}"' in first for n in names[:PAGE_SIZE])
    assert f'/console/adapters/{names[-1]}"' not in first and "Page 1 of 2" in first
    assert 'href="/console/adapters?q=paged&amp;page=2"' in first
    assert f'/console/adapters/{names[-1]}"' in second and "Page 2 of 2" in second
    assert "Page 2 of 2" in past_the_end
    assert refused.status_code == 400


@pytest.mark.parametrize("asked", ["²", "abc", "0", "99999999999999999999", "9" * 5000])
async def test_a_page_number_that_is_odd_is_a_400_that_says_why_or_the_last_page(
    browser_client, make_tenant, make_user, asked: str
) -> None:
    await sign_in(browser_client, (await make_user(await make_tenant())).email, PASSWORD)
    response = await browser_client.get("/console/adapters", params={"page": asked})
    if asked.startswith("9"):  # past the end: the last page
        assert response.status_code == 200 and "data-total" in response.text
    else:
        assert response.status_code == 400
        assert "page must be a whole number from 1" in response.text


async def test_another_tenants_adapter_page_is_a_404(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    owner = await make_tenant()
    adapter = await adapter_with_versions(operator, owner, tmp_path, 1)
    intruder = await make_user(await make_tenant())
    await sign_in(browser_client, intruder.email, PASSWORD)

    page = await browser_client.get(f"/console/adapters/{adapter}")
    fragment = await browser_client.get(f"/console/adapters/{adapter}/placement")

    assert page.status_code == 404 and fragment.status_code == 404
    assert "data-version" not in page.text + fragment.text


@needs_chromium
async def test_the_canary_slider_says_no_canary_at_weight_0_or_without_a_version_in_chromium(
    browser: Browser,
    console_url: str,
    make_tenant,
    make_user,
    operator: Api,
    tmp_path: Path,
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    assert (await tenant.api.put(f"{aliases}/prod", json={"version": 1})).status_code == 200
    page = await browser.new_page()
    await sign_in_page(page, console_url, (await make_user(tenant)).email)
    await page.goto(f"{console_url}/console/adapters/{adapter}")
    canary = page.locator("tr[data-canary-for=prod] form.canary")
    split, slider = canary.locator("output"), canary.get_by_label("Canary weight")

    await canary.get_by_label("Canary of prod").select_option("2")
    await expect(split).to_have_text("prod v1 100% · no canary")  # weight still 0
    await expect(slider).to_have_attribute("aria-valuetext", "no canary")
    await slider.fill("30")
    await expect(split).to_have_text("prod v1 70% · canary v2 30%")
    await expect(slider).to_have_attribute("aria-valuetext", "30% to the canary")
    await canary.get_by_label("Canary of prod").select_option("")
    await expect(split).to_have_text("prod v1 100% · no canary")
    await expect(slider).to_have_attribute("aria-valuetext", "no canary")


# --- in Chromium, against the served platform (real SGLang engines) ----------------------


@pytest.fixture(scope="module")
def admin_email(served: Served) -> str:
    """A tenant admin of the served tenant, made through the users API."""
    return served_tenant_admin(served, "adapters")


def _fresh_copy(served: Served, rank: int = 8) -> str:
    """A trained adapter of the served tenant uploaded again under a new name: a version
    no engine has seen, so it is surely cold."""
    name = f"fresh-{secrets.token_hex(3)}"
    folder = served.adapters[rank][1]
    base = f"{served.url}/api/v1/tenants/{served.tenant_id}/adapters"
    with httpx.Client(headers=served.headers(), timeout=60) as http:
        made = http.post(base, json={"name": name, "base_model": served.base})
        assert made.status_code == 201, made.text
        files = [("file", (n, (folder / n).read_bytes())) for n in FILES]
        uploaded = http.post(f"{base}/{name}/versions", files=files)
        assert uploaded.status_code == 201, uploaded.text
    return name


async def _signed_in(browser: Browser, served: Served, email: str) -> Page:
    page = await browser.new_page()
    await sign_in_page(page, served.url, email)
    return page


@needs_chromium
async def test_a_versions_tier_goes_from_cold_to_loaded_without_a_reload_in_chromium(
    browser: Browser, served: Served, admin_email: str
) -> None:
    name = _fresh_copy(served)
    page = await _signed_in(browser, served, admin_email)
    await page.click("text=Adapters")
    await page.fill("input[name=q]", name)
    await page.click("button:has-text('Search')")
    await screenshot_both(page, "adapters")
    await page.click(f"a:has-text('{name}')")
    tier = page.locator("#placement tr[data-version='1'] [data-best]")
    await expect(tier).to_have_text("cold")
    await page.evaluate("window.sameDocument = true")  # gone if the page were reloaded

    answer = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        headers=served.headers(),
        timeout=120,
    )

    assert answer.status_code == 200, answer.text
    await expect(tier).to_have_text(re.compile("^(loaded|active)$"), timeout=30_000)
    await expect(page.locator("#placement tr[data-version='1'] [data-loads]")).to_contain_text(
        "from"
    )
    assert await page.evaluate("window.sameDocument") is True
    await screenshot_both(page, "adapter-page-placed")


@needs_chromium
async def test_a_canary_weight_set_with_the_slider_is_saved_and_compared_in_chromium(
    browser: Browser, served: Served, admin_email: str
) -> None:
    name = _fresh_copy(served)
    page = await _signed_in(browser, served, admin_email)
    await page.goto(f"{served.url}/console/adapters/{name}")
    folder = served.adapters[8][1]
    card = page.locator(f"[data-adapter='{name}']")
    await card.locator("form.upload input[type=file]").set_input_files(
        [str(folder / n) for n in FILES]
    )
    await card.locator("form.upload button").click()
    await expect(card.locator("tr[data-version='2'] [data-status]")).to_have_text("ready")
    await card.locator("form.promote select[name=version]").select_option("1")
    await card.locator("form.promote button").click()
    canary = card.locator("tr[data-canary-for=prod] form.canary")

    await canary.get_by_label("Canary of prod").select_option("2")
    slider = canary.get_by_label("Canary weight")
    await slider.fill("19")
    await slider.press("ArrowRight")  # the keyboard moves it too

    await expect(canary.locator("output")).to_have_text("prod v1 80% · canary v2 20%")
    await canary.locator("button:has-text('Save canary')").click()
    await expect(card.locator("tr[data-alias=prod] [data-canary]")).to_have_text("v2 at 20%")
    await page.reload()
    await expect(card.locator("tr[data-alias=prod] [data-canary]")).to_have_text("v2 at 20%")
    await expect(canary.get_by_label("Canary weight")).to_have_value("20")
    await screenshot_both(page, "adapter-page")

    # "Compare canary with prod" opens the playground with both versions side by side.
    await card.locator("tr[data-canary-for=prod] a[data-compare]").click()
    await expect(page.get_by_label("Compare with a second model")).to_be_checked()
    await expect(page.get_by_label("Model", exact=True)).to_have_value(f"{name}@v1")
    await expect(page.get_by_label("Second model", exact=True)).to_have_value(f"{name}@v2")
