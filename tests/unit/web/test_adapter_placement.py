"""The adapter page's placement: each ready version's tier on every engine of its base model,
`cold` where the placement map does not hold it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from loraplex.control.adapters.schemas import VersionOut
from loraplex.serving.live.load_times import LoadTime
from loraplex.web.adapter_placement import adapter_placement

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _version(number: int, status: str = "ready") -> VersionOut:
    return VersionOut(
        id=uuid.uuid4(), adapter="bot", number=number, status=status, source="upload",
        rank=8, alpha=16.0, target_modules=[], size_bytes=1, sha256="", error="", created_at=NOW,
    )  # fmt: skip


def _engine(engine_id: str, base: str = "tiny") -> dict[str, Any]:
    return {"engine_id": engine_id, "name": f"name-{engine_id}", "base_model": base}


def _snapshot(versions: list[dict[str, Any]]) -> dict[str, Any]:
    engines = [_engine("e1"), _engine("e2"), _engine("other", base="bigger")]
    return {"engines": engines, "versions": versions, "loads": 0, "unloads": 0}


def test_a_version_the_placement_never_saw_is_cold_on_every_engine() -> None:
    placed = adapter_placement(_snapshot([]), "tiny", [_version(1)], lambda _: [])
    assert placed.live and placed.engines == ["name-e1", "name-e2"]  # its base model's only
    (row,) = placed.versions
    assert [t.tier for t in row.tiers] == ["cold", "cold"] and row.best == "cold"


def test_a_placed_version_shows_its_tier_per_engine_and_the_closest_one() -> None:
    v1, v2 = _version(1), _version(2)
    rows = [{"version_id": str(v2.id), "tiers": {"e2": "loaded"}, "pinned": True}]
    placed = adapter_placement(_snapshot(rows), "tiny", [v2, v1], lambda _: [])
    by_number = {row.number: row for row in placed.versions}
    assert [t.tier for t in by_number[2].tiers] == ["cold", "loaded"]
    assert by_number[2].best == "loaded" and by_number[2].pinned
    assert by_number[1].best == "cold" and not by_number[1].pinned


def test_only_ready_versions_are_placed_and_their_recent_loads_come_along() -> None:
    ready, archived = _version(2), _version(1, status="archived")
    load = LoadTime("name-e1", "cold", 0.5, NOW)
    loads = {ready.id: [load] * 5}
    placed = adapter_placement(_snapshot([]), "tiny", [ready, archived], lambda v: loads.get(v, []))
    assert [row.number for row in placed.versions] == [2]
    assert placed.versions[0].loads == [load] * 3  # the last few


def test_without_live_placement_nothing_is_placed() -> None:
    placed = adapter_placement(None, "tiny", [_version(1)], lambda _: [])
    assert not placed.live and placed.versions == []


def test_engines_in_rotation_that_hold_nothing_yet_show_every_version_cold() -> None:
    rotation = [("e3", "name-e3"), ("e1", "name-e1")]
    placed = adapter_placement(_snapshot([]), "tiny", [_version(1)], lambda _: [], rotation)
    assert placed.engines == ["name-e1", "name-e2", "name-e3"]
    assert [t.tier for t in placed.versions[0].tiers] == ["cold", "cold", "cold"]
