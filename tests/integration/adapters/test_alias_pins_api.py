"""Pinned aliases: tenants pin and unpin their aliases within the plan's `pinned_adapters`,
and placement reads the versions pinned aliases point at from PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from loraplex.db.config import sqlalchemy_config
from loraplex.serving.live import DbFacts
from loraplex.settings import Settings
from tests.conftest import Api
from tests.support.adapter_api import create_adapter, ensure_tiny_base, upload_valid


@pytest.fixture
async def aliased(operator: Api, make_tenant, tmp_path: Path) -> tuple[Any, str, list[UUID]]:
    """A pro tenant (2 pins) with one adapter, two versions and aliases a, b, c on version 1."""
    tenant = await make_tenant(plan="pro")
    await ensure_tiny_base(operator)
    adapter = await create_adapter(tenant.api, tenant.id)
    versions = [
        UUID((await upload_valid(tenant.api, tenant.id, adapter, tmp_path / f"v{n}"))["id"])
        for n in range(2)
    ]
    aliases = f"/api/v1/tenants/{tenant.id}/adapters/{adapter}/aliases"
    for name in ("a", "b", "c"):
        response = await tenant.api.put(f"{aliases}/{name}", json={"version": 1})
        assert response.status_code == 200, response.text
    return tenant, aliases, versions


async def no_limits(tenant_id: UUID) -> dict[str, int]:
    """Plans play no part in reading pins."""
    return {}


@pytest.fixture
async def facts(settings: Settings) -> AsyncIterator[DbFacts]:
    """Placement's facts source over the test database."""
    config = sqlalchemy_config(settings)
    yield DbFacts(config.create_session_maker(), no_limits)
    await config.get_engine().dispose()


async def test_a_pinned_alias_shows_pinned_in_listings(aliased) -> None:
    tenant, aliases, _ = aliased
    pinned = await tenant.api.put(f"{aliases}/a/pin")
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["pinned"] is True
    listed = {a["name"]: a["pinned"] for a in (await tenant.api.get(aliases)).json()}
    assert listed == {"a": True, "b": False, "c": False}
    assert (await tenant.api.get(f"{aliases}/a")).json()["pinned"] is True


async def test_pinning_twice_uses_one_pin(aliased) -> None:
    tenant, aliases, _ = aliased
    for _ in range(2):
        assert (await tenant.api.put(f"{aliases}/a/pin")).status_code == 200
    assert (await tenant.api.put(f"{aliases}/b/pin")).status_code == 200


async def test_pins_beyond_the_plan_are_refused_naming_the_limit(aliased) -> None:
    tenant, aliases, _ = aliased
    for name in ("a", "b"):
        assert (await tenant.api.put(f"{aliases}/{name}/pin")).status_code == 200
    refused = await tenant.api.put(f"{aliases}/c/pin")
    assert refused.status_code == 403
    assert refused.json()["type"].endswith("quota_exceeded")
    assert "pinned_adapters" in refused.json()["detail"]
    assert (await tenant.api.get(f"{aliases}/c")).json()["pinned"] is False


async def test_unpinning_frees_the_pin_for_another_alias(aliased) -> None:
    tenant, aliases, _ = aliased
    for name in ("a", "b"):
        await tenant.api.put(f"{aliases}/{name}/pin")
    unpinned = await tenant.api.delete(f"{aliases}/a/pin")
    assert unpinned.status_code == 200 and unpinned.json()["pinned"] is False
    assert (await tenant.api.put(f"{aliases}/c/pin")).status_code == 200


async def test_another_tenants_alias_cannot_be_pinned_or_unpinned(aliased, make_tenant) -> None:
    owner, aliases, _ = aliased
    intruder = await make_tenant()
    assert (await intruder.api.put(f"{aliases}/a/pin")).status_code == 404
    own_path = aliases.replace(owner.id, intruder.id)
    assert (await intruder.api.put(f"{own_path}/a/pin")).status_code == 404
    await owner.api.put(f"{aliases}/a/pin")
    assert (await intruder.api.delete(f"{aliases}/a/pin")).status_code == 404
    assert (await owner.api.get(f"{aliases}/a")).json()["pinned"] is True


async def test_pinning_an_unknown_alias_is_not_found(aliased) -> None:
    tenant, aliases, _ = aliased
    assert (await tenant.api.put(f"{aliases}/nope/pin")).status_code == 404


async def test_placement_reads_the_target_and_canary_of_pinned_aliases(
    aliased, facts: DbFacts
) -> None:
    tenant, aliases, (v1, v2) = aliased
    await tenant.api.put(f"{aliases}/a/pin")
    assert {v1} <= await facts.pinned_versions()
    await tenant.api.put(f"{aliases}/a/canary", json={"version": 2, "weight": 10})
    assert {v1, v2} <= await facts.pinned_versions()


async def test_the_pinned_version_follows_the_alias(aliased, facts: DbFacts) -> None:
    tenant, aliases, (v1, v2) = aliased
    await tenant.api.put(f"{aliases}/a/pin")
    await tenant.api.put(f"{aliases}/a", json={"version": 2})
    pinned = await facts.pinned_versions()
    assert v2 in pinned and v1 not in pinned  # b and c point at v1 but are not pinned
    await tenant.api.delete(f"{aliases}/a/pin")
    assert v2 not in await facts.pinned_versions()
