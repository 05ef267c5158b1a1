"""The adapter page's placement: each ready version's tier on every engine of its base model,
`cold` where live placement does not hold it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from loraplex.control.adapters.schemas import VersionOut
from loraplex.serving.live.load_times import LoadTime
from loraplex.serving.live.view import VersionTiers
from loraplex.web.adapter_placement import adapter_placement

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _version(number: int, status: str = "ready") -> VersionOut:
    return VersionOut(
        id=uuid.uuid4(), adapter="bot", number=number, status=status, source="upload",
        rank=8, alpha=16.0, target_modules=[], size_bytes=1, sha256="", error="", created_at=NOW,
    )  # fmt: skip


ENGINES = {"e1": "name-e1", "e2": "name-e2"}  # the base model's engines, id -> name


def test_a_version_the_placement_never_saw_is_cold_on_every_engine() -> None:
    placed = adapter_placement(ENGINES, {}, [_version(1)], lambda _: [])
    assert placed.live and placed.engines == ["name-e1", "name-e2"]
    (row,) = placed.versions
    assert [t.tier for t in row.tiers] == ["cold", "cold"] and row.best == "cold"


def test_a_placed_version_shows_its_tier_per_engine_and_the_closest_one() -> None:
    v1, v2 = _version(1), _version(2)
    where = {str(v2.id): VersionTiers({"e2": "loaded", "other": "active"}, pinned=True)}
    placed = adapter_placement(ENGINES, where, [v2, v1], lambda _: [])
    by_number = {row.number: row for row in placed.versions}
    assert [t.tier for t in by_number[2].tiers] == ["cold", "loaded"]  # its base model's only
    assert by_number[2].best == "loaded" and by_number[2].pinned
    assert by_number[1].best == "cold" and not by_number[1].pinned


def test_only_ready_versions_are_placed_and_their_recent_loads_come_along() -> None:
    ready, archived = _version(2), _version(1, status="archived")
    load = LoadTime("name-e1", "cold", 0.5, NOW)
    loads = {ready.id: [load] * 5}
    placed = adapter_placement(ENGINES, {}, [ready, archived], lambda v: loads.get(v, []))
    assert [row.number for row in placed.versions] == [2]
    assert placed.versions[0].loads == [load] * 3  # the last few


def test_without_live_placement_nothing_is_placed() -> None:
    placed = adapter_placement(None, {}, [_version(1)], lambda _: [])
    assert not placed.live and placed.versions == []


def test_engines_are_listed_by_name() -> None:
    engines = {"e3": "name-e3", **ENGINES}
    placed = adapter_placement(engines, {}, [_version(1)], lambda _: [])
    assert placed.engines == ["name-e1", "name-e2", "name-e3"]
    assert [t.tier for t in placed.versions[0].tiers] == ["cold", "cold", "cold"]
