"""`loraplex simulate`: compare serving policies on a generated workload."""

from __future__ import annotations

from pathlib import Path

import click

from loraplex.serving.simulator.report import table, write_json
from loraplex.serving.simulator.scenarios import SCENARIOS, ClusterShape
from loraplex.serving.simulator.workload import WorkloadSpec

# Per-scenario defaults; explicit options override them. The scale scenario keeps each
# engine about as busy as the 4-engine ones (~3 requests/s per engine).
_DEFAULTS: dict[str, dict[str, float]] = {
    "stationary": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    "scan": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    "rank-aware": {"requests": 30_000, "adapters": 1_000, "engines": 4, "rate": 12.0},
    "scale": {"requests": 1_000_000, "adapters": 10_000, "engines": 100, "rate": 300.0},
}


@click.command("simulate")
@click.option("--scenario", type=click.Choice(sorted(SCENARIOS)), default="stationary")
@click.option("--requests", type=int, default=None, help="Requests in the trace.")
@click.option("--adapters", type=int, default=None, help="Adapter versions.")
@click.option("--engines", type=int, default=None, help="Engine nodes.")
@click.option("--rate", type=float, default=None, help="Arrivals per second.")
@click.option("--alpha", type=float, default=1.0, show_default=True, help="Zipf exponent.")
@click.option("--scan-share", type=float, default=0.2, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
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
    json_path: Path | None,
) -> None:
    """Replay a generated workload against each policy and print the comparison."""
    base = _DEFAULTS[scenario]
    spec = WorkloadSpec(
        requests=int(requests or base["requests"]),
        adapters=int(adapters or base["adapters"]),
        tenants=max(20, int(adapters or base["adapters"]) // 50),  # ~50 adapters a tenant
        rate_per_s=rate or base["rate"],
        alpha=alpha,
        scan_share=scan_share,
        seed=seed,
    )
    shape = ClusterShape(engines=int(engines or base["engines"]))
    rows = SCENARIOS[scenario](spec, shape)
    click.echo(
        f"scenario={scenario} requests={spec.requests:,} adapters={spec.adapters:,} "
        f"engines={shape.engines} rate={spec.rate_per_s}/s seed={seed}"
    )
    click.echo(table(rows))
    if json_path is not None:
        params = {"workload": repr(spec), "cluster": repr(shape)}
        write_json(json_path, scenario, params, rows)
        click.echo(f"wrote {json_path}")


@click.group("sim")
def main() -> None:
    """Serving-policy simulator."""


main.add_command(simulate)
