"""The console over HTTP as a browser speaks it: sessions, CSRF, roles, and each form."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import httpx

from loraplex.db.config import sqlalchemy_config
from loraplex.gateway.usage import SpendKey, SqlUsageWriter, UsageRecorder
from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, htmx, sign_in
from tests.support.adapter_api import adapter_with_versions

WRONG = "Wrong email or password."


async def _record_usage(settings, tenant, *requests: tuple[str, int, int, dict]) -> None:
    """Record (model, prompt tokens, completion tokens, flags) as the gateway records usage."""
    config = sqlalchemy_config(settings)
    recorder = UsageRecorder(SqlUsageWriter(config.create_session_maker()))
    for model, prompt, completion, flags in requests:
        recorder.record(UUID(tenant.id), None, model, prompt, completion, **flags)
    await recorder.flush()
    await config.get_engine().dispose()


async def test_the_right_password_opens_the_console_and_a_wrong_one_or_email_reads_the_same(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant()
    user = await make_user(tenant)
    wrong_password = await sign_in(browser_client, user.email, "not the password")
    unknown_email = await sign_in(browser_client, "nobody@example.com", PASSWORD)
    assert (wrong_password.status_code, unknown_email.status_code) == (401, 401)
    assert WRONG in wrong_password.text and WRONG in unknown_email.text
    assert "loraplex_session" not in browser_client.cookies

    signed_in = await sign_in(browser_client, user.email.upper(), PASSWORD)
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/console"
    page = await browser_client.get("/console/")
    assert page.status_code == 200
    assert tenant.slug in page.text and "Quotas" in page.text and user.email in page.text


async def test_the_overview_charts_todays_usage_against_the_daily_quota(
    browser_client, make_tenant, make_user, settings
) -> None:
    tenant = await make_tenant()
    # as the gateway records two requests of 10 + 5 tokens, the second an eval run's
    evals = {"spend": SpendKey(None, None, "tiny-base", 0, kind="eval")}
    await _record_usage(settings, tenant, ("tiny-base", 10, 5, {}), ("tiny-base", 10, 5, evals))
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)

    page = (await browser_client.get("/console/")).text

    assert "2 requests · 30 tokens · 0 errors" in page
    assert ": 30 tokens</title></rect>" in page  # this hour's bar
    assert "30 / 5,000,000" in page  # the pro plan's daily_tokens, eval runs' tokens included
    assert "Of today's tokens, 15 were eval runs'" in page


async def test_the_overview_splits_the_days_tokens_by_model_most_first(
    browser_client, make_tenant, make_user, settings
) -> None:
    tenant = await make_tenant()
    served = [("support@prod", 20, 10, {})] * 3 + [("support@prod", 5, 0, {"error": True})]
    await _record_usage(settings, tenant, ("tiny-base", 10, 5, {}), *served)
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)

    page = (await browser_client.get("/console/")).text

    table = page.split('class="by-model"')[1].split("</table>")[0]
    assert table.index('data-model="support@prod"') < table.index('data-model="tiny-base"')
    row = table.split('data-model="support@prod"')[1].split("</tr>")[0]
    assert "<td>4</td>" in row and "<td>95</td>" in row and "86%" in row and "<td>1</td>" in row


async def test_usage_downloads_as_csv_per_day_and_model_and_bad_days_are_refused(
    browser_client, make_tenant, make_user, settings
) -> None:
    tenant = await make_tenant()
    await _record_usage(
        settings, tenant, ("tiny-base", 10, 5, {}), ("tiny-base", 1, 0, {"cut": True})
    )
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)

    download = await browser_client.get("/console/usage.csv", params={"days": "7"})
    refused = [
        await browser_client.get("/console/usage.csv", params={"days": days})
        for days in ("0", "32", "week")
    ]

    assert download.status_code == 200 and download.headers["content-type"].startswith("text/csv")
    assert 'filename="loraplex-usage-7d.csv"' in download.headers["content-disposition"]
    header, *rows = download.text.splitlines()
    assert header.split(",")[:4] == ["day", "model", "adapter_version_id", "requests"]
    assert [row.split(",")[1:] for row in rows] == [
        ["tiny-base", "", "2", "11", "5", "16", "0", "1"]
    ]
    assert all(r.status_code == 400 and "days must be a whole number" in r.text for r in refused)


async def test_pages_without_a_session_lead_to_sign_in(browser_client) -> None:
    page = await browser_client.get("/console/keys", follow_redirects=False)
    assert page.status_code == 302 and page.headers["location"] == "/login"
    fragment = await browser_client.get("/console/keys", headers={"hx-request": "true"})
    assert fragment.status_code == 401 and fragment.headers["hx-redirect"] == "/login"


async def test_a_form_post_without_the_csrf_token_is_refused_and_changes_nothing(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant()
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    forged = await browser_client.post(
        "/console/keys", data={"name": "forged", "scopes": "admin"}, headers={"hx-request": "true"}
    )
    assert forged.status_code == 403
    keys = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/api-keys")).json()["items"]
    assert "forged" not in {k["name"] for k in keys}


async def test_sign_in_attempts_past_the_limit_get_429_even_with_the_right_password(
    browser_client, make_tenant, make_user, settings
) -> None:
    user = await make_user(await make_tenant())
    for _ in range(settings.login_attempts_per_minute):
        assert (await sign_in(browser_client, user.email, "guess")).status_code == 401
    refused = await sign_in(browser_client, user.email, PASSWORD)
    assert refused.status_code == 429 and "Too many sign-in attempts" in refused.text


async def test_a_key_made_in_the_console_shows_its_secret_once_works_and_stops_when_revoked(
    browser_client, make_tenant, make_user, operator: Api
) -> None:
    tenant = await make_tenant()
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    created = await browser_client.post(
        "/console/keys", data={"name": "ci", "scopes": ["read"]}, headers=htmx(browser_client)
    )
    assert created.status_code == 201
    secret = created.text.split("<code data-secret>")[1].split("</code>")[0]
    key = Api(browser_client, secret)
    assert (await key.get(f"/api/v1/tenants/{tenant.id}")).status_code == 200

    made = next(
        k
        for k in (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/api-keys")).json()["items"]
        if k["name"] == "ci"
    )
    listed = (await browser_client.get("/console/keys")).text
    assert secret not in listed and made["prefix"] in listed  # the prefix, never the secret
    key_id = made["id"]
    revoked = await browser_client.post(
        f"/console/keys/{key_id}/revoke", headers=htmx(browser_client)
    )
    assert revoked.status_code == 200 and "revoked" in revoked.text
    assert (await key.get(f"/api/v1/tenants/{tenant.id}")).status_code == 401
    audit = (await operator.get("/api/v1/audit", params={"tenant_id": tenant.id})).json()
    actors = {(e["action"], e["actor"]) for e in audit["items"]}
    assert ("api_key.revoke", f"user:{user.email}") in actors


async def test_a_bad_key_form_gets_a_400_that_names_the_problem(
    browser_client, make_tenant, make_user
) -> None:
    user = await make_user(await make_tenant())
    await sign_in(browser_client, user.email, PASSWORD)
    no_name = await browser_client.post(
        "/console/keys", data={"name": "", "scopes": "read"}, headers=htmx(browser_client)
    )
    bad_scope = await browser_client.post(
        "/console/keys", data={"name": "x", "scopes": "root"}, headers=htmx(browser_client)
    )
    assert no_name.status_code == 400 and "name" in no_name.text
    assert bad_scope.status_code == 400 and "root" in bad_scope.text
    assert no_name.headers["hx-retarget"] == "#flash"  # shown above the page, form kept


async def test_a_member_can_look_but_not_change(browser_client, make_tenant, make_user) -> None:
    user = await make_user(await make_tenant(), role="tenant_member")
    await sign_in(browser_client, user.email, PASSWORD)
    assert (await browser_client.get("/console/keys")).status_code == 200
    refused = await browser_client.post(
        "/console/keys", data={"name": "x", "scopes": "read"}, headers=htmx(browser_client)
    )
    assert refused.status_code == 403 and "tenant admin" in refused.text


async def test_aliases_promote_roll_back_and_canary_from_the_console(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 3)
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    headers, base = htmx(browser_client), f"/console/adapters/{adapter}/aliases"

    for version in (1, 2):
        card = await browser_client.post(
            base, data={"alias": "prod", "version": version}, headers=headers
        )
        assert card.status_code == 200
    assert _alias(
        await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases/prod")
    ) == (2, 1, None, 0)
    canary = await browser_client.post(
        f"{base}/prod/canary", data={"version": 3, "weight": 10}, headers=headers
    )
    assert canary.status_code == 200 and "v3 at 10%" in canary.text
    rolled = await browser_client.post(f"{base}/prod/rollback", headers=headers)
    assert rolled.status_code == 200
    assert _alias(
        await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases/prod")
    ) == (1, 2, 3, 10)

    bad_name = await browser_client.post(
        base, data={"alias": "Prod!", "version": 1}, headers=headers
    )
    bad_weight = await browser_client.post(
        f"{base}/prod/canary", data={"version": 3, "weight": 150}, headers=headers
    )
    missing = await browser_client.post(base, data={"alias": "x", "version": 9}, headers=headers)
    assert bad_name.status_code == 400 and "must start with a-z" in bad_name.text
    assert bad_weight.status_code == 400 and "weight" in bad_weight.text
    assert missing.status_code == 404 and "version 9" in missing.text


async def test_another_tenants_adapter_does_not_exist_in_the_console(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    owner = await make_tenant()
    adapter = await adapter_with_versions(operator, owner, tmp_path, 1)
    intruder = await make_user(await make_tenant())
    await sign_in(browser_client, intruder.email, PASSWORD)
    response = await browser_client.post(
        f"/console/adapters/{adapter}/aliases",
        data={"alias": "prod", "version": 1},
        headers=htmx(browser_client),
    )
    assert response.status_code == 404
    assert adapter not in (await browser_client.get("/console/adapters")).text


async def test_operators_get_the_admin_ui_and_tenant_users_do_not(
    browser_client, make_tenant, make_user, operator_user
) -> None:
    tenant = await make_tenant()
    signed_in = await sign_in(browser_client, operator_user.email, operator_user.password)
    assert signed_in.headers["location"] == "/admin"
    assert (await browser_client.get("/", follow_redirects=False)).headers["location"] == "/admin"
    admin = await browser_client.get("/admin/")
    assert admin.status_code == 200 and tenant.slug in admin.text
    for section in ("This API process since", "Tokens per minute", "Engines and placement"):
        assert section in admin.text

    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    assert (await browser_client.get("/admin/")).status_code == 403
    assert (await browser_client.get("/", follow_redirects=False)).headers["location"] == "/console"


async def test_signing_out_ends_the_session(browser_client, make_tenant, make_user) -> None:
    user = await make_user(await make_tenant())
    await sign_in(browser_client, user.email, PASSWORD)
    out = await browser_client.post(
        "/logout", data={"_csrf_token": browser_client.cookies["csrftoken"]}, follow_redirects=False
    )
    assert out.status_code == 303
    after = await browser_client.get("/console/", follow_redirects=False)
    assert after.headers["location"] == "/login"
    assert (await browser_client.get("/", follow_redirects=False)).headers["location"] == "/login"


def _alias(response: httpx.Response) -> tuple[int, int | None, int | None, int]:
    body = response.json()
    return body["version"], body["previous_version"], body["canary_version"], body["canary_weight"]


async def test_an_upload_that_is_not_an_adapter_is_refused_and_named(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 0)
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    refused = await browser_client.post(
        f"/console/adapters/{adapter}/versions",
        files={"file": ("adapter_config.json", b"{not json", "application/json")},
        headers=htmx(browser_client),
    )
    assert refused.status_code == 422 and "no adapter_model.safetensors" in refused.text
    versions = await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions")
    assert versions.json()["items"] == []


async def test_an_operator_overrides_a_quota_and_suspends_a_tenant_from_the_admin_ui(
    browser_client, make_tenant, make_user, operator_user
) -> None:
    tenant = await make_tenant()
    await sign_in(browser_client, operator_user.email, operator_user.password)
    page = f"/admin/tenants/{tenant.id}"
    assert tenant.slug in (await browser_client.get(page)).text

    saved = await browser_client.post(
        f"{page}/quota",
        data={"requests_per_minute": "5", "max_rank": ""},
        headers=htmx(browser_client),
    )
    assert saved.status_code == 200 and "Quota saved." in saved.text
    quota = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/quota")).json()
    assert quota["overrides"] == {"requests_per_minute": 5}
    assert quota["effective"]["requests_per_minute"] == 5

    bad = await browser_client.post(
        f"{page}/quota", data={"requests_per_minute": "-1"}, headers=htmx(browser_client)
    )
    assert bad.status_code == 400 and "requests_per_minute" in bad.text

    member = await make_user(tenant)
    await browser_client.post(
        f"{page}/status", data={"status": "suspended"}, headers=htmx(browser_client)
    )
    refused = await tenant.api.get(f"/api/v1/tenants/{tenant.id}")  # at once, not in seconds
    assert refused.status_code == 403 and "suspended" in refused.json()["detail"]
    await sign_in(browser_client, member.email, PASSWORD)  # its users are shut out too
    playground = await browser_client.post(
        "/console/playground/chat", json={"model": "x"}, headers=htmx(browser_client)
    )
    assert playground.status_code == 403 and "suspended" in playground.text
    await sign_in(browser_client, operator_user.email, operator_user.password)
    await browser_client.post(
        f"{page}/status", data={"status": "active"}, headers=htmx(browser_client)
    )
    assert (await tenant.api.get(f"/api/v1/tenants/{tenant.id}")).status_code == 200


async def test_a_tenant_admin_cannot_change_quotas(browser_client, make_tenant, make_user) -> None:
    tenant = await make_tenant()
    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    refused = await browser_client.post(
        f"/admin/tenants/{tenant.id}/quota",
        data={"requests_per_minute": "100000"},
        headers=htmx(browser_client),
    )
    assert refused.status_code == 403
    quota = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/quota")).json()
    assert quota["overrides"] == {}


async def test_a_tenant_admin_adds_a_user_who_signs_in_and_removes_them(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant()
    admin = await make_user(tenant)
    await sign_in(browser_client, admin.email, PASSWORD)
    email = f"new-{tenant.slug}@example.com"
    form = {"email": email, "name": "New", "role": "tenant_member", "password": "a fine password"}
    added = await browser_client.post("/console/users", data=form, headers=htmx(browser_client))
    assert added.status_code == 201 and email in added.text
    again = await browser_client.post("/console/users", data=form, headers=htmx(browser_client))
    short = await browser_client.post(
        "/console/users",
        data={**form, "email": "x@example.com", "password": "short"},
        headers=htmx(browser_client),
    )
    operator_role = await browser_client.post(
        "/console/users",
        data={**form, "email": "y@example.com", "role": "operator"},
        headers=htmx(browser_client),
    )
    assert again.status_code == 409 and "already exists" in again.text
    assert short.status_code == 400 and "password" in short.text
    assert operator_role.status_code == 400 and "operator" in operator_role.text

    users = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/users")).json()["items"]
    ids = {u["email"]: u["id"] for u in users}
    assert (await sign_in(browser_client, email, "a fine password")).status_code == 303
    await sign_in(browser_client, admin.email, PASSWORD)
    yourself = await browser_client.post(
        f"/console/users/{ids[admin.email]}/remove", headers=htmx(browser_client)
    )
    assert yourself.status_code == 400
    removed = await browser_client.post(
        f"/console/users/{ids[email]}/remove", headers=htmx(browser_client)
    )
    assert removed.status_code == 200 and email not in removed.text
    assert (await sign_in(browser_client, email, "a fine password")).status_code == 401


async def test_operators_list_every_tenants_adapters_and_fine_tunes(
    browser_client, make_tenant, make_user, operator: Api, operator_user, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    await sign_in(browser_client, operator_user.email, operator_user.password)

    page = (await browser_client.get("/admin/adapters")).text
    row = page.split(f'data-adapter="{tenant.slug}/{adapter}"')[1].split("</tr>")[0]
    cells = [c.split(">")[-1] for c in row.split("</td>")[:6]]
    assert cells[3:5] == ["2", "2"]  # two versions, both ready
    assert (await browser_client.get("/admin/jobs")).status_code == 200

    user = await make_user(tenant)
    await sign_in(browser_client, user.email, PASSWORD)
    assert (await browser_client.get("/admin/adapters")).status_code == 403
    assert (await browser_client.get("/admin/jobs")).status_code == 403
