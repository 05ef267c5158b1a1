"""The overload scenario over seeds and profiles: run, tabulate, write JSON."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from statistics import fmean
from typing import Any

import click

from loraplex.serving.simulator.engine_profile import EngineProfile, load_profile
from loraplex.serving.simulator.overload import pool as pool_scenario
from loraplex.serving.simulator.overload.capacity import yardstick
from loraplex.serving.simulator.overload.scenario import POLICIES, TARGETS, run_seed, summary

REFERENCE_PROFILE = "sglang-cpu"
FASTER = 10.0  # the second profile: the same engine, steps 10x faster
REQUESTS_AT_1X = 300  # requests a load of 1x capacity offers per run (2x: twice as many)
COLUMNS = (
    ("2x goodput", "{:.2f}"),
    ("2x p99/SLO", "{:.2f}"),
    ("4x goodput", "{:.2f}"),
    ("4x p99/SLO", "{:.2f}"),
    ("bursts 2x goodput", "{:.2f}"),
    ("bursts 2x p99/SLO", "{:.2f}"),
    ("diurnal 2x goodput", "{:.2f}"),
    ("diurnal 2x p99/SLO", "{:.2f}"),
    ("mixed 2x goodput", "{:.2f}"),
    ("mixed 2x p99/SLO", "{:.2f}"),
    ("B p99 beside A / alone", "{:.2f}"),
    ("B refused", "{:.0f}"),
    ("Jain 2x", "{:.3f}"),
)


def profiles(name: str = REFERENCE_PROFILE) -> list[EngineProfile]:
    """The reference profile and the same with steps `FASTER` times as fast."""
    reference = load_profile(name)
    return [reference, reference.faster(FASTER)]


def run_overload(
    seeds: list[int], profile_name: str, requests_at_1x: int = REQUESTS_AT_1X, pool: bool = False
) -> dict[str, Any]:
    """Every policy, load and seed on both profiles; prints the tables, returns the record.
    With `pool`, the pool scenario (pool.py): a pool of engines and its policies."""
    started = time.perf_counter()
    scenario = "overload-pool" if pool else "overload"
    record: dict[str, Any] = {"scenario": scenario, "seeds": seeds, "profiles": []}
    policies = pool_scenario.POOL_POLICIES if pool else POLICIES
    run_one = pool_scenario.run_pool_seed if pool else run_seed
    for profile in profiles(profile_name):
        yard = pool_scenario.pool_yardstick(profile) if pool else yardstick(profile)
        label = profile.source.get("scaled", profile.name)
        engines = f"{pool_scenario.POOL_ENGINES} engines of " if pool else ""
        click.echo(
            f"\nprofile {engines}{label}: unloaded TTFT {yard.unloaded_ttft_s * 1000:.1f} ms, "
            f"SLO {yard.slo_s * 1000:.1f} ms, capacity {yard.capacity_per_s:.2f}/s, places "
            f"{yard.places}, prefill places {yard.prefill_places}"
        )
        rows = {policy: [] for policy in policies}  # type: dict[str, list[dict[str, Any]]]
        for seed in seeds:
            for policy, results in run_one(profile, yard, seed, requests_at_1x).items():
                rows[policy].append({"seed": seed, **summary(results)})
        click.echo(_mean_table(rows))
        click.echo(_target_table(rows))
        record["profiles"].append(
            {
                "profile": label,
                "yardstick": asdict(yard),
                "step": asdict(profile.step),
                "rows": rows,
            }
        )
    click.echo(f"\n{len(seeds)} seeds in {time.perf_counter() - started:.0f} s")
    return record


def _mean_table(rows: dict[str, list[dict[str, Any]]]) -> str:
    header = ["policy (mean over seeds)", *(name for name, _ in COLUMNS)]
    body = [
        [policy, *(fmt.format(fmean(r[name] for r in runs)) for name, fmt in COLUMNS)]
        for policy, runs in rows.items()
    ]
    return _aligned(header, body)


def _target_table(rows: dict[str, list[dict[str, Any]]]) -> str:
    header = ["seeds meeting each target", *(name for name, _ in TARGETS)]
    body = [
        [policy, *(f"{sum(check(r) for r in runs)}/{len(runs)}" for _, check in TARGETS)]
        for policy, runs in rows.items()
    ]
    return _aligned(header, body)


def _aligned(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(header)]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in [header, *body]
    )


def write(path: Path, record: dict[str, Any]) -> None:
    """The whole record as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))
