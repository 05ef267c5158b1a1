"""`loraplex bench overload-model`: the simulator's prediction beside a `bench overload` run.

Reads the JSON that `bench overload` wrote and replays each of its load levels (0.5x-4x of
the measured capacity) on the simulator's engine model of `--profile`: Poisson arrivals at
the level's offered rate, as many as arrived live, every request with the prompt and output
length the live requests had. Admission off runs with no admission; admission on with the
simulator's copy of the policy the live API ran (`--on-policy`). Goodput counts the
requests whose TTFT met the run's own SLO (twice its unloaded p99), per second of the level.
The model has no tail of its own (no host, no gateway, no HTTP), so its p99 is the queue's
alone: the table shows how much of the live p99 the engine explains
(docs/admission.md, "Simulator against the live engine").
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from loraplex.gateway.admission.core import PlanLimits
from loraplex.serving.simulator.engine_profile import EngineProfile, load_profile
from loraplex.serving.simulator.overload import drive
from loraplex.serving.simulator.overload.capacity import yardstick
from loraplex.serving.simulator.overload.scenario import make_policy, places_told
from loraplex.serving.simulator.overload.workload import TenantLoad, generate

LEVELS = ("0.5x", "1.0x", "2.0x", "4.0x")


@dataclass(frozen=True, slots=True)
class Figures:
    """Goodput (requests/s within the SLO) and TTFT quantiles (ms) of one level."""

    goodput: float
    p50_ms: float
    p99_ms: float


def predict_level(
    profile: EngineProfile,
    policy: str,
    rate: float,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    slo_ms: float,
    seeds: range,
) -> Figures:
    """The median over `seeds` of one level's figures on the engine model."""
    duration = requests / rate
    runs = []
    for seed in seeds:
        tenants = (TenantLoad("bench", rate, PlanLimits(priority=1, requests_per_minute=None)),)
        trace = generate(tenants, duration, seed)
        n = len(trace)
        trace = replace(trace, prompt=np.full(n, prompt_tokens), output=np.full(n, output_tokens))
        # The yardstick is a capacity search: only a policy that is told places needs it.
        if policy == "none":
            made, places = make_policy(policy, profile, None, trace), None  # type: ignore[arg-type]
        else:
            yard = yardstick(profile)
            made, places = (
                make_policy(policy, profile, yard, trace),
                places_told(policy, profile, yard),
            )
        outcome = drive.run(trace, profile, made, places)
        ttft = 1000 * (outcome.first_token_at - trace.arrival)
        served = ttft[~np.isnan(outcome.finished_at)]
        runs.append(
            Figures(
                float((served <= slo_ms).sum() / duration),
                float(np.quantile(served, 0.5)) if len(served) else float("nan"),
                float(np.quantile(served, 0.99)) if len(served) else float("nan"),
            )
        )
    return Figures(
        statistics.median(r.goodput for r in runs),
        statistics.median(r.p50_ms for r in runs),
        statistics.median(r.p99_ms for r in runs),
    )


def compare_run(
    rows: list[dict[str, Any]],
    profile: EngineProfile,
    on_policy: str,
    prompt_tokens: int,
    output_tokens: int,
    seeds: range,
) -> list[dict[str, Any]]:
    """Each load level of a `bench overload` run, measured and predicted."""
    table = []
    for row in rows:
        if row.get("level") not in LEVELS or "admission" not in row:
            continue
        arrived = len(row["requests"]) + sum(row["refused"].values()) + row["failed"]
        policy = "none" if row["admission"] == "off" else on_policy
        predicted = predict_level(
            profile,
            policy,
            row["offered"],
            arrived,
            prompt_tokens,
            output_tokens,
            row["slo_ms"],
            seeds,
        )
        table.append(
            {
                "level": row["level"],
                "admission": row["admission"],
                "offered": row["offered"],
                "requests": arrived,
                "measured": asdict(Figures(row["goodput"], row["p50_ms"], row["p99_ms"])),
                "predicted": asdict(predicted),
            }
        )
    return table


@click.command("overload-model")
@click.option(
    "--json",
    "json_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=Path("var/bench/overload.json"),
    show_default=True,
    help="What `bench overload` wrote.",
)
@click.option("--profile", default="sglang-cpu", show_default=True, help="Name or path.")
@click.option(
    "--on-policy",
    type=click.Choice(["today", "core", "fixed cap"]),
    default="core",
    show_default=True,
    help="The simulator's policy for the live run's admission-on rows.",
)
@click.option("--prompt-tokens", default=26, show_default=True, help="The live prompt's tokens.")
@click.option("--output-tokens", default=32, show_default=True, help="The live replies' tokens.")
@click.option("--seeds", default=5, show_default=True, help="Arrival draws per level (median).")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Also write JSON.")
def bench_overload_model(
    json_path: Path,
    profile: str,
    on_policy: str,
    prompt_tokens: int,
    output_tokens: int,
    seeds: int,
    out: Path | None,
) -> None:
    """Predict a `bench overload` run's levels on an engine profile; print both."""
    rows = json.loads(json_path.read_text())
    table = compare_run(
        rows, load_profile(profile), on_policy, prompt_tokens, output_tokens, range(seeds)
    )
    click.echo(
        f"{'level':>5} {'adm':>4} {'offered/s':>9} {'n':>4} {'goodput':>15} {'p50 ms':>15} "
        f"{'p99 ms':>15}   (measured / model)"
    )
    for t in table:
        m, p = t["measured"], t["predicted"]
        click.echo(
            f"{t['level']:>5} {t['admission']:>4} {t['offered']:>9.2f} {t['requests']:>4} "
            f"{m['goodput']:>7.2f}/{p['goodput']:<7.2f} {m['p50_ms']:>7.0f}/{p['p50_ms']:<7.0f} "
            f"{m['p99_ms']:>7.0f}/{p['p99_ms']:<7.0f}"
        )
    if out is not None:
        out.write_text(json.dumps(table, indent=2))
