"""Passwords in the console: changing your own, a tenant admin setting a user's, and what
either does to sessions already open elsewhere."""

from __future__ import annotations

from typing import Any

from tests.integration.web.conftest import PASSWORD, htmx, sign_in

NEW = "a brand new passphrase"


def _session_cookies(client: Any) -> dict[str, str]:
    return {name: value for name, value in client.cookies.items()}


async def _signed_in_twice(client: Any, email: str) -> dict[str, str]:
    """Sign in on "a laptop", then again here; the laptop session's cookies."""
    await sign_in(client, email, PASSWORD)
    laptop = _session_cookies(client)
    await sign_in(client, email, PASSWORD)
    return laptop


async def _is_signed_in(client: Any, cookies: dict[str, str]) -> bool:
    client.cookies.clear()
    client.cookies.update(cookies)
    page = await client.get("/console/", follow_redirects=False)
    return page.status_code == 200


async def test_changing_your_password_keeps_this_session_and_ends_the_others(
    browser_client, make_tenant, make_user
) -> None:
    user = await make_user(await make_tenant())
    laptop = await _signed_in_twice(browser_client, user.email)
    assert "Change your password" in (await browser_client.get("/account/")).text

    changed = await browser_client.post(
        "/account/password",
        data={"current": PASSWORD, "new": NEW, "confirm": NEW},
        headers=htmx(browser_client),
    )

    assert changed.status_code == 200 and "Password changed" in changed.text
    this_session = _session_cookies(browser_client)  # the answer carried a fresh cookie
    assert await _is_signed_in(browser_client, this_session)
    assert not await _is_signed_in(browser_client, laptop)
    assert (await sign_in(browser_client, user.email, PASSWORD)).status_code == 401
    assert (await sign_in(browser_client, user.email, NEW)).status_code == 303


async def test_a_wrong_current_password_or_a_mismatch_is_refused_and_changes_nothing(
    browser_client, make_tenant, make_user
) -> None:
    user = await make_user(await make_tenant())
    await sign_in(browser_client, user.email, PASSWORD)
    post = lambda **data: browser_client.post(  # noqa: E731
        "/account/password", data=data, headers=htmx(browser_client)
    )

    wrong = await post(current="not it at all", new=NEW, confirm=NEW)
    mismatch = await post(current=PASSWORD, new=NEW, confirm=NEW + "!")
    short = await post(current=PASSWORD, new="short", confirm="short")

    assert wrong.status_code == 400 and "current password is wrong" in wrong.text
    assert mismatch.status_code == 400 and "confirmation differ" in mismatch.text
    assert short.status_code == 400 and "8 to 200 characters" in short.text
    assert (await sign_in(browser_client, user.email, PASSWORD)).status_code == 303


async def test_a_tenant_admin_sets_a_users_password_and_their_sessions_end(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant()
    admin, member = await make_user(tenant), await make_user(tenant, role="tenant_member")
    await sign_in(browser_client, member.email, PASSWORD)
    members_session = _session_cookies(browser_client)
    member_id = await _user_id(tenant, member.email)
    refused = await browser_client.post(
        f"/console/users/{member_id}/password", data={"password": NEW}, headers=htmx(browser_client)
    )
    assert refused.status_code == 403  # members look, they do not change

    await sign_in(browser_client, admin.email, PASSWORD)
    admin_id = await _user_id(tenant, admin.email)
    own = await browser_client.post(
        f"/console/users/{admin_id}/password", data={"password": NEW}, headers=htmx(browser_client)
    )
    reset = await browser_client.post(
        f"/console/users/{member_id}/password", data={"password": NEW}, headers=htmx(browser_client)
    )

    assert own.status_code == 400 and "your account page" in own.text
    assert reset.status_code == 200 and f"New password set for {member.email}" in reset.text
    assert not await _is_signed_in(browser_client, members_session)
    assert (await sign_in(browser_client, member.email, NEW)).status_code == 303


async def test_another_tenants_user_cannot_be_given_a_password(
    browser_client, make_tenant, make_user
) -> None:
    other = await make_tenant()
    victim = await make_user(other)
    victim_id = await _user_id(other, victim.email)
    intruder = await make_user(await make_tenant())
    await sign_in(browser_client, intruder.email, PASSWORD)
    refused = await browser_client.post(
        f"/console/users/{victim_id}/password", data={"password": NEW}, headers=htmx(browser_client)
    )
    assert refused.status_code == 404
    assert (await sign_in(browser_client, victim.email, PASSWORD)).status_code == 303


async def _user_id(tenant: Any, email: str) -> str:
    users = (await tenant.api.get(f"/api/v1/tenants/{tenant.id}/users")).json()["items"]
    return next(u["id"] for u in users if u["email"] == email)


async def test_signing_out_everywhere_else_keeps_only_this_session(
    browser_client, make_tenant, make_user
) -> None:
    user = await make_user(await make_tenant())
    laptop = await _signed_in_twice(browser_client, user.email)

    ended = await browser_client.post("/account/sessions/end", headers=htmx(browser_client))

    assert ended.status_code == 200 and "Every other session is signed out" in ended.text
    assert await _is_signed_in(browser_client, _session_cookies(browser_client))
    assert not await _is_signed_in(browser_client, laptop)
    assert (await sign_in(browser_client, user.email, PASSWORD)).status_code == 303  # same password


async def test_a_tenant_admin_signs_a_user_out_everywhere(
    browser_client, make_tenant, make_user
) -> None:
    tenant = await make_tenant()
    admin, member = await make_user(tenant), await make_user(tenant, role="tenant_member")
    await sign_in(browser_client, member.email, PASSWORD)
    members_session = _session_cookies(browser_client)
    await sign_in(browser_client, admin.email, PASSWORD)
    admins_session = _session_cookies(browser_client)

    member_id = await _user_id(tenant, member.email)
    ended = await browser_client.post(
        f"/console/users/{member_id}/sessions/end", headers=htmx(browser_client)
    )

    assert ended.status_code == 200 and f"{member.email} is signed out everywhere" in ended.text
    assert not await _is_signed_in(browser_client, members_session)
    assert await _is_signed_in(browser_client, admins_session)
