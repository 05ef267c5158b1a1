"""The adapter card's actions beyond aliasing: archive a version, download its files, pin and
unpin an alias within the plan's pins, delete an alias."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.conftest import Api
from tests.integration.web.conftest import PASSWORD, htmx, sign_in
from tests.support.adapter_api import adapter_with_versions


async def test_a_version_is_archived_from_the_console_unless_an_alias_points_at_it(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 2)
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    card = f"/console/adapters/{adapter}"
    await browser_client.post(
        f"{card}/aliases", data={"alias": "prod", "version": 2}, headers=htmx(browser_client)
    )

    refused = await browser_client.post(f"{card}/versions/2/archive", headers=htmx(browser_client))
    archived = await browser_client.post(f"{card}/versions/1/archive", headers=htmx(browser_client))

    assert refused.status_code == 409 and "alias &#39;prod&#39; points at version 2" in refused.text
    assert archived.status_code == 200
    versions = (
        await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/versions")
    ).json()["items"]
    assert {v["number"]: v["status"] for v in versions} == {1: "archived", 2: "ready"}


async def test_a_versions_files_download_from_the_console_as_stored(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    member = await make_user(tenant, role="tenant_member")  # looking includes downloading
    await sign_in(browser_client, member.email, PASSWORD)
    base = f"/console/adapters/{adapter}/versions/1/files"
    assert (
        f'{base}/adapter_model.safetensors"'
        in (await browser_client.get(f"/console/adapters/{adapter}")).text
    )

    weights = await browser_client.get(f"{base}/adapter_model.safetensors")
    unknown = await browser_client.get(f"{base}/secrets.txt")

    uploaded = (tmp_path / "v0" / "adapter_model.safetensors").read_bytes()
    assert weights.status_code == 200 and weights.content == uploaded
    assert weights.headers["x-sha256"] == hashlib.sha256(uploaded).hexdigest()
    assert unknown.status_code == 404 and "adapter_config.json" in unknown.text


async def test_pins_are_set_and_cleared_from_the_console_within_the_plans_pins(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()  # the pro plan allows 2 pinned adapters
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    card = f"/console/adapters/{adapter}/aliases"
    for alias in ("a", "b", "c"):
        await browser_client.post(
            card, data={"alias": alias, "version": 1}, headers=htmx(browser_client)
        )

    pin = lambda alias, pinned="true": browser_client.post(  # noqa: E731
        f"{card}/{alias}/pin", data={"pinned": pinned}, headers=htmx(browser_client)
    )
    assert (await pin("a")).status_code == 200 and (await pin("b")).status_code == 200
    third = await pin("c")
    assert third.status_code == 403 and "pinned_adapters" in third.text
    assert (await pin("a", "false")).status_code == 200
    assert (await pin("c")).status_code == 200

    aliases = (
        await tenant.api.get(f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases")
    ).json()
    assert {a["name"]: a["pinned"] for a in aliases} == {"a": False, "b": True, "c": True}


async def test_a_deleted_alias_no_longer_resolves(
    browser_client, make_tenant, make_user, operator: Api, tmp_path: Path
) -> None:
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 1)
    await sign_in(browser_client, (await make_user(tenant)).email, PASSWORD)
    card = f"/console/adapters/{adapter}/aliases"
    await browser_client.post(
        card, data={"alias": "prod", "version": 1}, headers=htmx(browser_client)
    )

    deleted = await browser_client.post(f"{card}/prod/delete", headers=htmx(browser_client))

    assert deleted.status_code == 200 and "No aliases." in deleted.text
    alias = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases/prod"
    assert (await tenant.api.get(alias)).status_code == 404
