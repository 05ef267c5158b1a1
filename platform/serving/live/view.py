"""The cluster-wide placement map: each version's tier per engine, slots used, heat."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loraplex.serving.policy import Tier

if TYPE_CHECKING:
    from loraplex.serving.live.placement import LivePlacement
    from loraplex.serving.live.pool import Pool
    from loraplex.serving.policy.node import NodeState


@dataclass(frozen=True)
class VersionTiers:
    """Where one version is now: its tier on each engine holding any of it, and its pin."""

    tiers: dict[str, str]  # engine id -> active, loaded or disk (engines without it left out)
    pinned: bool


def tiers_of(placement: LivePlacement, version_ids: Iterable[str]) -> dict[str, VersionTiers]:
    """The tiers of just `version_ids` (those this process has placed), without building the
    whole map: its cost grows with the versions asked for, not with every tenant's."""
    wanted = set(version_ids)
    found: dict[str, VersionTiers] = {}
    for pool in placement.pools.values():
        cluster = pool.core.cluster
        for version_id in wanted & cluster.versions.keys():
            tiers = {
                n.node_id: n.tier_of(version_id).name.lower() for n in cluster.holders(version_id)
            }
            found[version_id] = VersionTiers(tiers, version_id in cluster.pinned)
    return found


def snapshot(placement: LivePlacement) -> dict[str, Any]:
    """Engines (slots used, queue) and versions (tier per engine, heat, pin), as plain data."""
    now = placement.clock()
    engines: list[dict[str, Any]] = []
    versions: list[dict[str, Any]] = []
    for pool in placement.pools.values():
        engines.extend(_engines(pool, now))
        versions.extend(_versions(placement, pool, now))
    return {
        "engines": sorted(engines, key=lambda e: str(e["name"])),
        "versions": sorted(versions, key=lambda v: (-float(v["heat"]), str(v["version_id"]))),
        "loads": placement.runner.loads,
        "unloads": placement.runner.unloads,
    }


def waiting_adapters(node: NodeState, now: float) -> list[dict[str, Any]]:
    """Adapters with requests routed to the node and not yet released to it, longest
    waiting first: for their engine load (`load`: being loaded, or no host slot is free) or,
    loaded, for a GPU slot (`gpu slot`)."""
    rows = [
        {"version_id": v, "requests": len(rs), "waiting_s": now - min(r.arrival for r in rs),
         "waiting_for": "load"}
        for v, rs in node.waiting.items() if rs
    ]  # fmt: skip
    rows.extend(
        {"version_id": v, "requests": count, "waiting_s": now - since, "waiting_for": "gpu slot"}
        for v, (count, since) in node.queue.waiting_for_slot().items()
    )
    return sorted(rows, key=lambda row: -float(row["waiting_s"]))


def _engines(pool: Pool, now: float) -> list[dict[str, Any]]:
    rows = []
    for node_id, entry in pool.nodes.items():
        node = pool.core.cluster.nodes[node_id]
        rows.append(
            {
                "engine_id": node_id,
                "name": entry.handle.name,
                "base_model": pool.base_model,
                "max_lora_rank": node.spec.max_lora_rank,
                "gpu_slots": node.spec.gpu_slots,
                "gpu_slots_used": node.gpu.num_occupied(),
                "host_slots": node.spec.host_slots,
                "host_slots_used": len(node.host),
                "disk_bytes_used": node.disk.used,
                "running": node.running,
                "queued": node.queue.size,
                "loading": len(node.pending),
                "waiting": waiting_adapters(node, now),
            }
        )
    return rows


def _versions(placement: LivePlacement, pool: Pool, now: float) -> list[dict[str, Any]]:
    cluster = pool.core.cluster
    rows = []
    for version_id, tiers in cluster.placement_map().items():
        spec = cluster.versions[version_id]
        rows.append(
            {
                "version_id": version_id,
                "tenant_id": spec.tenant_id,
                "rank": spec.rank,
                "size_bytes": spec.size_bytes,
                "heat": round(cluster.heat(version_id, now), 4),
                "pinned": version_id in cluster.pinned,
                "tiers": tiers,
                "best": max(
                    (Tier[t.upper()] for t in tiers.values()), default=Tier.COLD
                ).name.lower(),
            }
        )
    return rows
