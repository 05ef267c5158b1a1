"""`loraplex simulate`: compare serving policies on a generated workload."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from loraplex.serving.simulator.report import gap_table, pass_table, table, write_json
from loraplex.serving.simulator.scenarios import SCENARIOS, ClusterShape
from loraplex.serving.simulator.seeds import bound_gaps, parse_seeds, pass_counts
from loraplex.serving.simulator.targets import check
from loraplex.serving.simulator.workload import WorkloadSpec

# Per-scenario defaults; explicit options override them. The scale scenario keeps each
# engine about as busy as the 4-engine ones (~3 requests/s per engine).
_DEFAULTS: dict[str, dict[str, float]] = {
    "stationary": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    "shifting": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    "scan": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    "rank-aware": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    "scale": {"requests": 1_000_000, "adapters": 10_000, "engines": 100, "rate": 300.0},
    # Loads ahead of need: gated at a rate that fills admission's places (16/s keeps up;
    # at 20/s the gate's queue grows without end and loading early cannot help).
    "gated": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 16.0},
    "uploads": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    # Spread for slots: a working set that fits host memory and contends for GPU slots.
    "spread": {"requests": 30_000, "adapters": 64, "engines": 4, "rate": 40.0},
}
# `targets` runs the scenarios whose targets the issue note reports, each at its defaults.
TARGET_SCENARIOS = ("stationary", "shifting", "scan", "rank-aware")


@dataclass(frozen=True, slots=True)
class Options:
    """Command-line overrides; None keeps the scenario's default."""

    requests: int | None
    adapters: int | None
    engines: int | None
    rate: float | None
    alpha: float
    scan_share: float
    seed: int


def run_scenario(scenario: str, opts: Options, *, quiet: bool = False) -> dict[str, Any]:
    """Run one scenario, print its table and PASS/FAIL lines; returns its JSON record.

    `quiet`: print nothing (the multi-seed summary prints its own tables).
    """
    base = _DEFAULTS[scenario]
    adapters = int(opts.adapters or base["adapters"])
    spec = WorkloadSpec(
        requests=int(opts.requests or base["requests"]),
        adapters=adapters,
        tenants=max(20, adapters // 50),  # ~50 adapters a tenant
        rate_per_s=opts.rate or base["rate"],
        alpha=opts.alpha,
        scan_share=opts.scan_share,
        seed=opts.seed,
    )
    shape = ClusterShape(engines=int(opts.engines or base["engines"]))
    rows = SCENARIOS[scenario](spec, shape)
    verdicts = check(scenario, rows)
    if not quiet:
        click.echo(
            f"scenario={scenario} requests={spec.requests:,} adapters={spec.adapters:,} "
            f"engines={shape.engines} rate={spec.rate_per_s}/s seed={opts.seed}"
        )
        click.echo(table(rows))
        for verdict in verdicts:
            click.echo(verdict.line())
    return {
        "scenario": scenario,
        "seed": opts.seed,
        "params": {"workload": repr(spec), "cluster": repr(shape)},
        "rows": rows,
        "targets": [
            {"target": v.target, "passed": v.passed, "measured": v.measured, "gating": v.gating}
            for v in verdicts
        ],
    }


def _seeds_option(_: click.Context, __: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        seeds: list[int] = parse_seeds(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return seeds


def _one_seed(names: tuple[str, ...], opts: Options, *, summarize: bool) -> list[dict[str, Any]]:
    """Each scenario's table and verdicts at `opts.seed`; with `summarize`, the pass total."""
    records = []
    for index, name in enumerate(names):
        if index:
            click.echo("")
        records.append(run_scenario(name, opts))
    if summarize:
        verdicts = [v for record in records for v in _gating(record)]
        passed = sum(v["passed"] for v in verdicts)
        click.echo(f"\n{passed}/{len(verdicts)} targets PASS")
    return records


def _gating(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's verdicts that count; superseded ones are only reported (targets.py)."""
    return [v for v in record["targets"] if v.get("gating", True)]


def _many_seeds(names: tuple[str, ...], opts: Options, seeds: list[int]) -> list[dict[str, Any]]:
    """Every scenario at every seed: a line per seed, then the gaps to the bound and the
    pass counts."""
    records = []
    started = time.perf_counter()
    for seed in seeds:
        batch = [run_scenario(name, replace(opts, seed=seed), quiet=True) for name in names]
        total = sum(len(_gating(record)) for record in batch)
        failed = [
            f"\n  FAIL  {record['scenario']}: {v['target']}: {v['measured']}"
            for record in batch
            for v in _gating(record)
            if not v["passed"]
        ]
        unmet = [
            f"\n  INFO  {record['scenario']}: {v['target']}: {v['measured']} (not met)"
            for record in batch
            for v in record["targets"]
            if not v.get("gating", True) and not v["passed"]
        ]
        passed = total - len(failed)
        click.echo(f"seed {seed}: {passed}/{total} targets PASS{''.join(failed + unmet)}")
        records.extend(batch)
    click.echo(f"\ncold loads as a multiple of the lower bound, seeds {_seed_list(seeds)}:")
    click.echo(gap_table(bound_gaps(records)))
    click.echo(f"\ntargets passed, seeds {_seed_list(seeds)}:")
    click.echo(pass_table(pass_counts(records)))
    click.echo(f"\n{len(seeds)} seeds in {time.perf_counter() - started:.0f} s")
    return records


def _seed_list(seeds: list[int]) -> str:
    contiguous = seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 1 else ",".join(map(str, seeds))


@click.command("simulate")
@click.option(
    "--scenario",
    type=click.Choice([*sorted(SCENARIOS), "targets", "overload", "overload-pool"]),
    default="stationary",
)
@click.option(
    "--requests",
    type=int,
    default=None,
    help="Requests in the trace (overload, overload-pool: per run at 1x capacity, default 300).",
)
@click.option("--adapters", type=int, default=None, help="Adapter versions.")
@click.option("--engines", type=int, default=None, help="Engine nodes.")
@click.option("--rate", type=float, default=None, help="Arrivals per second.")
@click.option("--alpha", type=float, default=1.0, show_default=True, help="Zipf exponent.")
@click.option("--scan-share", type=float, default=0.2, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--seeds",
    callback=_seeds_option,
    default=None,
    help="Run each of these seeds (0-9, 0,3,7) instead of --seed and print each policy's "
    "cold loads as a multiple of the lower bound (mean, worst) and each target's pass count.",
)
@click.option(
    "--profile",
    default="sglang-cpu",
    show_default=True,
    help="overload, overload-pool: an engine profile by name (profiles/) or path; it runs as it is "
    "and with steps 10x faster.",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def simulate(
    scenario: str,
    requests: int | None,
    adapters: int | None,
    engines: int | None,
    rate: float | None,
    alpha: float,
    scan_share: float,
    seed: int,
    seeds: list[int] | None,
    profile: str,
    json_path: Path | None,
) -> None:
    """Replay a generated workload against each policy and print the comparison."""
    if scenario in ("overload", "overload-pool"):  # admission on the engine model (overload/)
        from loraplex.serving.simulator.overload import report

        record = report.run_overload(
            seeds or [seed],
            profile,
            requests or report.REQUESTS_AT_1X,
            pool=scenario == "overload-pool",
        )
        if json_path is not None:
            report.write(json_path, record)
            click.echo(f"wrote {json_path}")
        return
    opts = Options(requests, adapters, engines, rate, alpha, scan_share, seed)
    names = TARGET_SCENARIOS if scenario == "targets" else (scenario,)
    if seeds is None:
        records = _one_seed(names, opts, summarize=scenario == "targets")
    else:
        records = _many_seeds(names, opts, seeds)
    if json_path is not None:
        write_json(json_path, scenario, records)
        click.echo(f"wrote {json_path}")


@click.group("sim")
def main() -> None:
    """Serving-policy simulator."""


main.add_command(simulate)
