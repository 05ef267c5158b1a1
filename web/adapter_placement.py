"""Where each version of one adapter is right now, from this process's live placement.

A pure function of the placement snapshot (the operators' map) and the versions: the tier
on every engine of the adapter's base model — `active` (a GPU slot), `loaded` (engine host
memory), `disk` (the node's cache) or `cold` (object store only, also for a version the
placement has never seen) — with the last few engine loads and how long each took.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from loraplex.control.adapters.schemas import VersionOut
from loraplex.serving.live.load_times import LoadTime
from loraplex.serving.policy import Tier

COLD = Tier.COLD.name.lower()
LOADS_SHOWN = 3


@dataclass(frozen=True)
class EngineTier:
    """One version's tier on one engine."""

    engine: str  # the engine's name
    tier: str  # active, loaded, disk or cold


@dataclass(frozen=True)
class VersionPlacement:
    """One version: its tier per engine, the closest of them, and its recent loads."""

    number: int
    tiers: list[EngineTier]
    best: str  # the highest tier on any engine
    pinned: bool
    loads: list[LoadTime]  # newest first


@dataclass(frozen=True)
class AdapterPlacement:
    """The adapter's servable versions on the engines of its base model."""

    live: bool  # False: this process places nothing (no engines configured)
    engines: list[str]
    versions: list[VersionPlacement]


def adapter_placement(
    snapshot: dict[str, Any] | None,
    base_model: str,
    versions: Sequence[VersionOut],
    recent_loads: Callable[[UUID], list[LoadTime]],
    in_rotation: Sequence[tuple[str, str]] = (),
) -> AdapterPlacement:
    """The tiers of `versions` (ready ones) on `base_model`'s engines, from `snapshot`
    (`LivePlacement.snapshot()`, None without live placement). `in_rotation` (id, name)
    adds the engines that may serve the base model but hold nothing placed yet (the
    snapshot lists a base model's engines from its first request on)."""
    if snapshot is None:
        return AdapterPlacement(False, [], [])
    engines = {
        e["engine_id"]: e["name"] for e in snapshot["engines"] if e["base_model"] == base_model
    }
    engines.update(in_rotation)
    order = sorted(engines.items(), key=lambda item: item[1])
    placed = {str(v["version_id"]): v for v in snapshot["versions"]}
    rows = []
    for version in versions:
        if version.status != "ready":
            continue
        row = placed.get(str(version.id), {})
        on = row.get("tiers", {})
        tiers = [EngineTier(name, on.get(engine_id, COLD)) for engine_id, name in order]
        best = max((Tier[t.tier.upper()] for t in tiers), default=Tier.COLD).name.lower()
        loads = recent_loads(version.id)[:LOADS_SHOWN]
        rows.append(VersionPlacement(version.number, tiers, best, bool(row.get("pinned")), loads))
    return AdapterPlacement(True, [name for _, name in order], rows)
