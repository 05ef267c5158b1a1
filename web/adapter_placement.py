"""Where each version of one adapter is right now, from this process's live placement.

A pure function of what live placement knows of the versions and of the base model's
engines (`LivePlacement.tiers_of`, `engines_for`: cheap enough to poll): the tier
on every engine of the adapter's base model — `active` (a GPU slot), `loaded` (engine host
memory), `disk` (the node's cache) or `cold` (object store only, also for a version the
placement has never seen) — with the last few engine loads and how long each took.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from loraplex.control.adapters.schemas import VersionOut
from loraplex.serving.live.load_times import LoadTime
from loraplex.serving.live.view import VersionTiers
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
    engines: Mapping[str, str] | None,
    placed: Mapping[str, VersionTiers],
    versions: Sequence[VersionOut],
    recent_loads: Callable[[UUID], list[LoadTime]],
) -> AdapterPlacement:
    """The tiers of `versions` (ready ones) on the base model's `engines` (id -> name; None
    where this process places nothing), from `placed` (by version id; a version missing
    from it is cold everywhere)."""
    if engines is None:
        return AdapterPlacement(False, [], [])
    order = sorted(engines.items(), key=lambda item: item[1])
    rows = []
    for version in versions:
        if version.status != "ready":
            continue
        where = placed.get(str(version.id))
        on = where.tiers if where else {}
        tiers = [EngineTier(name, on.get(engine_id, COLD)) for engine_id, name in order]
        best = max((Tier[t.tier.upper()] for t in tiers), default=Tier.COLD).name.lower()
        loads = recent_loads(version.id)[:LOADS_SHOWN]
        pinned = bool(where and where.pinned)
        rows.append(VersionPlacement(version.number, tiers, best, pinned, loads))
    return AdapterPlacement(True, [name for _, name in order], rows)
