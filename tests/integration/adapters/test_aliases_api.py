"""Aliases: promote, roll back, canary; and tenant isolation of adapters, versions and aliases."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Api
from tests.support.adapter_api import adapter_with_versions


@pytest.fixture
async def three_versions(operator: Api, make_tenant, tmp_path: Path):
    tenant = await make_tenant()
    adapter = await adapter_with_versions(operator, tenant, tmp_path, 3)
    return tenant, f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"


async def test_promote_then_rollback(three_versions) -> None:
    tenant, aliases = three_versions
    assert (await tenant.api.put(f"{aliases}/prod", json={"version": 1})).json()["version"] == 1
    promoted = (await tenant.api.put(f"{aliases}/prod", json={"version": 2})).json()
    assert promoted["version"] == 2 and promoted["previous_version"] == 1
    rolled = (await tenant.api.post(f"{aliases}/prod/rollback")).json()
    assert rolled["version"] == 1 and rolled["previous_version"] == 2


async def test_rollback_without_history_is_a_conflict(three_versions) -> None:
    tenant, aliases = three_versions
    await tenant.api.put(f"{aliases}/staging", json={"version": 3})
    response = await tenant.api.post(f"{aliases}/staging/rollback")
    assert response.status_code == 409


async def test_canary_weight_is_set_and_cleared(three_versions) -> None:
    tenant, aliases = three_versions
    await tenant.api.put(f"{aliases}/prod", json={"version": 1})
    canary = (
        await tenant.api.put(f"{aliases}/prod/canary", json={"version": 2, "weight": 10})
    ).json()
    assert canary["canary_version"] == 2 and canary["canary_weight"] == 10
    cleared = (await tenant.api.put(f"{aliases}/prod/canary", json={"weight": 0})).json()
    assert cleared["canary_version"] is None and cleared["canary_weight"] == 0


async def test_promoting_the_canary_ends_the_canary(three_versions) -> None:
    tenant, aliases = three_versions
    await tenant.api.put(f"{aliases}/prod", json={"version": 1})
    await tenant.api.put(f"{aliases}/prod/canary", json={"version": 2, "weight": 25})
    promoted = (await tenant.api.put(f"{aliases}/prod", json={"version": 2})).json()
    assert promoted["version"] == 2 and promoted["canary_version"] is None


@pytest.mark.parametrize(
    "body", [{"version": 2, "weight": 101}, {"version": 2, "weight": -1}, {"version": 0}]
)
async def test_invalid_canary_values_are_refused(three_versions, body) -> None:
    tenant, aliases = three_versions
    await tenant.api.put(f"{aliases}/prod", json={"version": 1})
    assert (await tenant.api.put(f"{aliases}/prod/canary", json=body)).status_code == 400


async def test_alias_to_a_missing_version_is_not_found(three_versions) -> None:
    tenant, aliases = three_versions
    assert (await tenant.api.put(f"{aliases}/prod", json={"version": 9})).status_code == 404


async def test_alias_named_like_a_version_number_is_refused(three_versions) -> None:
    tenant, aliases = three_versions
    assert (await tenant.api.put(f"{aliases}/v2", json={"version": 1})).status_code == 400


async def test_archiving_an_aliased_version_is_refused(three_versions) -> None:
    tenant, aliases = three_versions
    await tenant.api.put(f"{aliases}/prod", json={"version": 1})
    versions = aliases.replace("/aliases", "/versions")
    response = await tenant.api.post(f"{versions}/1/archive")
    assert response.status_code == 409 and "prod" in response.json()["detail"]


async def test_other_tenants_adapters_versions_and_aliases_do_not_exist(
    three_versions, make_tenant
) -> None:
    owner, aliases = three_versions
    await owner.api.put(f"{aliases}/prod", json={"version": 1})
    intruder = await make_tenant()
    adapter_path = aliases.rsplit("/aliases", 1)[0]
    for path in [
        adapter_path,
        f"{adapter_path}/versions",
        f"{adapter_path}/versions/1",
        f"{adapter_path}/versions/1/download",
        f"{aliases}/prod",
    ]:
        assert (await intruder.api.get(path)).status_code == 404, path
    # the intruder's own tenant path with the owner's adapter name is just as absent
    own_path = adapter_path.replace(owner.id, intruder.id)
    assert (await intruder.api.get(own_path)).status_code == 404
    assert (await intruder.api.put(f"{aliases}/prod", json={"version": 2})).status_code == 404
    assert (await owner.api.get(f"{aliases}/prod")).json()["version"] == 1


async def test_an_alias_name_outside_the_pattern_is_refused_with_400(three_versions) -> None:
    tenant, aliases = three_versions
    response = await tenant.api.put(f"{aliases}/Prod%21", json={"version": 1})
    assert response.status_code == 400 and "must start with a-z" in response.json()["detail"]
    assert (await tenant.api.get(aliases)).json() == []
