"""Operators edit plans and move tenants between them in the admin UI; tenants feel it."""

from __future__ import annotations

import secrets

from tests.integration.web.conftest import PASSWORD, htmx, sign_in


async def test_an_operator_creates_a_plan_moves_a_tenant_onto_it_and_edits_it(
    browser_client, make_tenant, operator_user
) -> None:
    tenant = await make_tenant()
    await sign_in(browser_client, operator_user.email, operator_user.password)
    name = f"team-{secrets.token_hex(3)}"
    assert 'data-plan="pro"' in (await browser_client.get("/admin/plans/")).text

    created = await browser_client.post(
        "/admin/plans/",
        data={"name": name, "description": "for teams", "requests_per_minute": "7"},
        headers=htmx(browser_client),
    )
    moved = await browser_client.post(
        f"/admin/tenants/{tenant.id}/plan", data={"plan": name}, headers=htmx(browser_client)
    )

    assert created.status_code == 200 and f"Plan {name} saved." in created.text
    assert moved.status_code == 200 and f"Tenant is now on plan {name}." in moved.text
    quota = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/quota")).json()
    assert (quota["plan"], quota["effective"]) == (name, {"requests_per_minute": 7})

    edited = await browser_client.post(
        "/admin/plans/",
        data={"name": name, "requests_per_minute": "9", "daily_tokens": "1000"},
        headers=htmx(browser_client),
    )
    assert edited.status_code == 200 and "1 tenant<" in edited.text
    quota = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/quota")).json()
    assert quota["effective"] == {"requests_per_minute": 9, "daily_tokens": 1000}


async def test_a_bad_plan_form_is_refused_with_the_field_named(
    browser_client, make_tenant, operator_user
) -> None:
    tenant = await make_tenant()
    await sign_in(browser_client, operator_user.email, operator_user.password)
    post = lambda url, **data: browser_client.post(url, data=data, headers=htmx(browser_client))  # noqa: E731

    bad_name = await post("/admin/plans/", name="Big Plan!")
    negative = await post("/admin/plans/", name="ok-plan", max_rank="-4")
    unknown = await post(f"/admin/tenants/{tenant.id}/plan", plan="no-such-plan")

    assert bad_name.status_code == 400 and "name" in bad_name.text
    assert negative.status_code == 400 and "max_rank" in negative.text
    assert unknown.status_code == 400 and "unknown plan &#39;no-such-plan&#39;" in unknown.text
    taken = await post("/admin/plans/", name="pro", new="true", max_rank="1")
    assert taken.status_code == 409 and "plan &#39;pro&#39; already exists" in taken.text
    plans = (await browser_client.get("/admin/plans/")).text
    assert 'data-plan="ok-plan"' not in plans
    pro = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/quota")).json()["plan_limits"]
    assert pro["max_rank"] == 64  # the pro plan was not overwritten


async def test_tenant_admins_cannot_edit_plans(browser_client, make_tenant, make_user) -> None:
    user = await make_user(await make_tenant())
    await sign_in(browser_client, user.email, PASSWORD)
    assert (await browser_client.get("/admin/plans/")).status_code == 403
    refused = await browser_client.post(
        "/admin/plans/", data={"name": "pro", "max_rank": "512"}, headers=htmx(browser_client)
    )
    assert refused.status_code == 403
