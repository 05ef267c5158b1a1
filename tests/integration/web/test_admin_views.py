"""The operator's views: tenants searched and paged, the audit log filtered and paged, and a
dashboard and engines table that refresh themselves (htmx polling, proved in Chromium)."""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from loraplex.bench.tenants import new_tenant
from tests.conftest import Api
from tests.integration.conftest import Served
from tests.integration.web.conftest import PASSWORD, needs_chromium, sign_in, sign_in_page
from tests.support.adapter_api import ensure_tiny_base
from tests.support.screens import screenshot_both

NOWHERE = "http://127.0.0.1:9"  # nothing listens: a registered engine that never answers
LIVE = 10_000  # ms to wait for a poll (every 3 s) to bring a change


async def _tenant(operator: Api, name: str) -> dict[str, Any]:
    slug = f"v-{secrets.token_hex(5)}"
    made = await operator.post("/api/v1/tenants", json={"slug": slug, "name": name, "plan": "pro"})
    assert made.status_code == 201, made.text
    return dict(made.json())


def _attr(page: str, name: str) -> list[str]:
    """Every value of the HTML attribute `name` in `page`, in order."""
    return re.findall(rf'{name}="([^"]*)"', page)


@pytest.fixture
async def as_operator(browser_client: Any, operator_user: Any) -> Any:
    """The shared test client, signed in as an operator."""
    await sign_in(browser_client, operator_user.email, operator_user.password)
    return browser_client


async def test_tenant_search_matches_part_of_a_name_in_any_case_and_nothing_else(
    as_operator, operator: Api
) -> None:
    word = secrets.token_hex(4)
    wanted = await _tenant(operator, f"Zebra Logistics {word}")
    other = await _tenant(operator, f"Aardvark Foods {word}")

    page = await as_operator.get("/admin/tenants", params={"q": f"LOGISTICS {word}"})

    assert page.status_code == 200
    assert _attr(page.text, "data-tenant") == [wanted["slug"]]
    assert other["slug"] not in page.text


async def test_tenant_search_matches_a_slug(as_operator, operator: Api) -> None:
    wanted = await _tenant(operator, "Named otherwise")
    page = await as_operator.get("/admin/tenants", params={"q": wanted["slug"][2:]})
    assert _attr(page.text, "data-tenant") == [wanted["slug"]]


async def test_the_next_page_link_shows_the_tenants_after_the_first_25(
    as_operator, operator: Api
) -> None:
    word = secrets.token_hex(4)
    for n in range(26):
        await _tenant(operator, f"Pager {word} {n:02d}")

    first = (await as_operator.get("/admin/tenants", params={"q": f"pager {word}"})).text
    next_link = re.search(r'<a href="([^"]+)" rel="next" aria-label="Next page[^"]*"', first)
    assert next_link is not None and "Page 1 of 2" in first
    second = (await as_operator.get(next_link.group(1).replace("&amp;", "&"))).text

    assert len(_attr(first, "data-tenant")) == 25
    assert "Page 2 of 2" in second and 'rel="prev"' in second and 'rel="next"' not in second
    assert f"Pager {word} 25" in second and f"Pager {word} 25" not in first


async def test_a_long_tenant_name_is_clipped_with_the_whole_name_in_its_title(
    as_operator, operator: Api
) -> None:
    name = f"Very long organisation name {secrets.token_hex(4)} " + "x" * 150
    tenant = await _tenant(operator, name)
    page = (await as_operator.get("/admin/tenants", params={"q": tenant["slug"]})).text
    assert f'class="clip" href="/admin/tenants/{tenant["id"]}" title="{name}"' in page


async def test_the_audit_log_filters_by_tenant_and_by_action(
    as_operator, make_tenant, operator: Api
) -> None:
    mine, theirs = await make_tenant(), await make_tenant()  # each: tenant.create, api_key.create

    by_tenant = (await as_operator.get("/admin/audit", params={"tenant": mine.slug})).text
    by_action = (await as_operator.get("/admin/audit", params={"action": "tenant.create"})).text
    family = await as_operator.get("/admin/audit", params={"tenant": mine.id, "action": "api_key"})

    assert sorted(_attr(by_tenant, "data-action")) == ["api_key.create", "tenant.create"]
    assert set(_attr(by_tenant, "data-tenant")) == {mine.slug} and theirs.slug not in by_tenant
    assert set(_attr(by_action, "data-action")) == {"tenant.create"}
    assert theirs.slug in by_action  # the newest tenant.create is on the first page
    assert _attr(family.text, "data-action") == ["api_key.create"]


async def test_the_audit_log_filters_by_day(as_operator, make_tenant) -> None:
    tenant = await make_tenant()
    today = (await as_operator.get("/admin/audit", params={"tenant": tenant.slug})).text
    day = re.search(r'<td class="nowrap">(\d{4}-\d\d-\d\d)', today)
    assert day is not None
    same = {"tenant": tenant.slug, "from": day.group(1), "to": day.group(1)}
    before = {"tenant": tenant.slug, "to": "2001-01-01"}

    assert len(_attr((await as_operator.get("/admin/audit", params=same)).text, "data-audit")) == 2
    assert _attr((await as_operator.get("/admin/audit", params=before)).text, "data-audit") == []


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("/admin/audit", {"from": "yesterday"}, "from must be a date written YYYY-MM-DD"),
        ("/admin/audit", {"from": "2025-02-01", "to": "2025-01-01"}, "from must not be after to"),
        ("/admin/audit", {"tenant": "no-such-tenant-slug"}, "no tenant has the slug"),
        ("/admin/audit", {"page": "-1"}, "page must be a whole number from 1"),
        ("/admin/tenants", {"page": "-1"}, "page must be a whole number from 1"),
    ],
)
async def test_a_filter_that_cannot_be_read_is_a_400_explained_in_the_page(
    as_operator, path: str, params: dict[str, str], message: str
) -> None:
    response = await as_operator.get(path, params=params)
    assert response.status_code == 400
    assert message in response.text and 'role="alert"' in response.text


@pytest.mark.parametrize(
    ("path", "params", "status"),
    [
        ("/admin/tenants", {"page": "²"}, 400),  # "²".isdigit() is true, yet no number
        # past any OFFSET a database takes: read as the last page
        ("/admin/tenants", {"page": "99999999999999999999"}, 200),
        ("/admin/tenants", {"page": "9" * 5000}, 200),  # longer than int() reads
        ("/admin/audit", {"page": "99999999999999999999"}, 200),
        ("/admin/audit", {"to": "9999-12-31"}, 200),  # the last day there is: no day after it
        ("/admin/audit", {"from": "9999-12-31", "to": "9999-12-31"}, 200),
    ],
)
async def test_odd_paging_and_dates_are_answered_never_a_500(
    as_operator, path: str, params: dict[str, str], status: int
) -> None:
    response = await as_operator.get(path, params=params)
    assert response.status_code == status, response.text
    if status == 400:
        assert 'role="alert"' in response.text and "page must be a whole number" in response.text


async def test_a_page_past_the_end_shows_the_last_page(as_operator, operator: Api) -> None:
    word = secrets.token_hex(4)
    tenant = await _tenant(operator, f"Last page {word}")
    page = await as_operator.get(
        "/admin/tenants", params={"q": word, "page": "99999999999999999999"}
    )
    assert page.status_code == 200 and _attr(page.text, "data-tenant") == [tenant["slug"]]


async def test_the_dashboards_live_sections_poll_fragments_that_show_new_tenants(
    as_operator, operator: Api
) -> None:
    dashboard = (await as_operator.get("/admin/")).text
    polled = _attr(dashboard, "hx-get")
    before = (await as_operator.get("/admin/live/tenants")).text
    tenant = await _tenant(operator, f"Fresh {secrets.token_hex(4)}")
    after = (await as_operator.get("/admin/live/tenants")).text

    for live in ("figures", "traffic", "placement", "tenants"):
        assert f"/admin/live/{live}" in polled
    assert dashboard.count('hx-trigger="every 3s"') == 4
    assert tenant["slug"] not in before and tenant["slug"] in after
    assert "/admin/engines/live" in _attr((await as_operator.get("/admin/engines/")).text, "hx-get")
    assert 'id="engines-live"' in (await as_operator.get("/admin/engines/live")).text


async def test_tenant_admins_are_refused_every_operator_view(
    browser_client, make_tenant, make_user
) -> None:
    user = await make_user(await make_tenant())
    await sign_in(browser_client, user.email, PASSWORD)
    for path in (
        "/admin/tenants",
        "/admin/audit",
        "/admin/live/figures",
        "/admin/live/traffic",
        "/admin/live/placement",
        "/admin/live/tenants",
        "/admin/engines/live",
    ):
        assert (await browser_client.get(path)).status_code == 403, path


async def _mark(page: Page) -> None:
    """A variable that survives only while the page is not reloaded or navigated away."""
    await page.evaluate("window.__notReloaded = true")


async def _still_marked(page: Page) -> bool:
    return bool(await page.evaluate("window.__notReloaded === true"))


# Resolves once htmx has swapped in the next answer of the live fragment with this id.
_NEXT_POLL = """id => new Promise(done => document.body.addEventListener('htmx:afterSettle',
    function seen(event) {
        if (event.detail.elt.id !== id) return;
        document.body.removeEventListener('htmx:afterSettle', seen);
        done();
    }))"""


async def _fits(page: Page, width: int = 390) -> bool:
    """Whether the page lays out within `width` pixels (tables scroll inside their box)."""
    await page.set_viewport_size({"width": width, "height": 844})
    fits = await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    await page.set_viewport_size({"width": 1280, "height": 800})
    return bool(fits)


@needs_chromium
async def test_the_dashboard_and_engines_table_update_without_a_reload_in_chromium(
    browser: Browser, console_url: str, operator: Api, operator_user
) -> None:
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await sign_in_page(page, console_url, operator_user.email)
    await _mark(page)
    count = page.locator("[data-stat=tenants]")
    before = int((await count.inner_text()).replace(",", ""))

    tenant = await _tenant(operator, f"Live {secrets.token_hex(4)}")

    await expect(count).to_have_text(f"{before + 1:,}", timeout=LIVE)
    await expect(page.locator(f"#live-tenants [data-tenant='{tenant['slug']}']")).to_be_visible()
    assert await _still_marked(page)
    assert await _fits(page)
    await screenshot_both(page, "admin-overview")

    base = await ensure_tiny_base(operator)  # before the page lists base models
    await page.click("nav >> text=Engines")
    await _mark(page)
    name = f"live-{secrets.token_hex(3)}"
    body = {"name": name, "url": NOWHERE, "kind": "vllm", "base_model": base}
    engine = await operator.post("/api/v1/engines", json=body)
    assert engine.status_code == 201, engine.text
    try:
        await expect(page.locator(f"tr[data-engine='{name}']")).to_be_visible(timeout=LIVE)
        assert await _still_marked(page) and await _fits(page)
        await screenshot_both(page, "admin-engines")

        # An error shown above the page stays there while the table goes on refreshing.
        await page.get_by_label("Name", exact=True).fill(name)
        await page.get_by_label("Base model").select_option(base)
        await page.get_by_label("URL", exact=True).fill(NOWHERE)
        await page.get_by_role("button", name="Register").click()
        flash = page.locator("#flash .error")
        await expect(flash).to_contain_text("already registered")
        await page.evaluate(_NEXT_POLL, "engines-live")
        await expect(flash).to_contain_text("already registered")
    finally:
        await operator.delete(f"/api/v1/engines/{engine.json()['id']}")
    await expect(page.locator(f"tr[data-engine='{name}']")).to_have_count(0, timeout=LIVE)


@needs_chromium
async def test_an_operator_searches_tenants_and_filters_the_audit_log_in_chromium(
    browser: Browser, console_url: str, operator: Api, operator_user
) -> None:
    word = secrets.token_hex(4)
    long_name = f"Searchable Holdings {word} " + "with a very long registered name " * 5
    tenant = await _tenant(operator, long_name)
    await _tenant(operator, f"Unrelated {secrets.token_hex(4)}")
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await sign_in_page(page, console_url, operator_user.email)

    await page.click("nav >> text=Tenants")
    await _mark(page)
    await page.get_by_label("Name or slug contains").fill(f"holdings {word}")
    rows = page.locator("#tenant-results tr[data-tenant]")
    await expect(rows).to_have_count(1)
    await expect(rows.first.locator("a.clip")).to_have_attribute("title", long_name)
    assert await _still_marked(page) and "q=holdings" in page.url
    assert await _fits(page)
    await screenshot_both(page, "admin-tenants")

    await page.click("nav >> text=Audit log")
    await page.get_by_label("Tenant (slug or id)").fill(tenant["slug"])
    await page.get_by_label("Action").fill("tenant.create")
    await page.get_by_role("button", name="Filter").click()
    entries = page.locator("#audit-results tr[data-audit]")
    await expect(entries).to_have_count(1)
    await expect(entries.first).to_contain_text("tenant.create")
    await page.get_by_label("From (UTC day)").fill("2001-01-02")
    await page.get_by_label("To (UTC day)").fill("2001-01-01")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("#audit-results [role=alert]")).to_contain_text("after to")
    await page.get_by_label("From (UTC day)").fill("")
    await page.get_by_label("To (UTC day)").fill("")
    await page.get_by_role("button", name="Filter").click()
    await expect(entries).to_have_count(1)
    assert await _fits(page)
    await screenshot_both(page, "admin-audit")


@pytest.mark.engine
async def test_a_tenants_page_shows_its_refused_requests_by_status_and_reason(
    served: Served, operator_user: Any
) -> None:
    tenant_id, key = new_tenant(served.url, served.operator_key, requests_per_minute=1)
    body = {"model": served.base, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    async with httpx.AsyncClient(base_url=served.url, timeout=60) as client:
        statuses = [
            (await client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})).status_code
            for _ in range(3)
        ]  # fmt: skip
        assert statuses == [200, 429, 429]
        await sign_in(client, operator_user.email, operator_user.password)
        page = (await client.get(f"/admin/tenants/{tenant_id}")).text

    [row] = re.findall(r'<tr data-reason="rpm">(.*?)</tr>', page, re.S)
    assert "429" in row and "over its requests per minute" in row
    assert re.search(r"<td data-count>2</td>", row)
