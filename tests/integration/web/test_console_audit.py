"""A tenant's own audit log in the console: its entries only, whatever the query asks."""

from __future__ import annotations

import re

from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, sign_in


def _ids(html: str) -> set[str]:
    return set(re.findall(r'data-audit="([^"]+)"', html))


async def test_a_tenant_sees_its_own_audit_entries_and_never_anothers(
    browser_client, make_tenant, make_user, operator: Api
) -> None:
    mine, theirs = await make_tenant(), await make_tenant()
    await sign_in(browser_client, (await make_user(mine)).email, PASSWORD)
    their_entries = (await operator.get(f"/api/v1/tenants/{theirs.id}/audit")).json()["items"]

    page = await browser_client.get("/console/audit")
    asked_for_theirs = await browser_client.get("/console/audit", params={"tenant": theirs.id})
    keys_only = await browser_client.get("/console/audit", params={"action": "api_key"})

    assert page.status_code == 200
    assert {"tenant.create", "api_key.create", "user.create"} <= set(
        re.findall(r'data-action="([^"]+)"', page.text)
    )
    assert not _ids(page.text) & {e["id"] for e in their_entries}
    assert _ids(asked_for_theirs.text) == _ids(page.text)  # the tenant filter is not offered
    assert set(re.findall(r'data-action="([^"]+)"', keys_only.text)) == {"api_key.create"}


async def test_a_date_the_console_cannot_read_is_a_400_in_the_page(
    browser_client, make_tenant, make_user
) -> None:
    await sign_in(browser_client, (await make_user(await make_tenant())).email, PASSWORD)

    refused = await browser_client.get("/console/audit", params={"from": "yesterday"})

    assert refused.status_code == 400 and "from must be a date written YYYY-MM-DD" in refused.text
