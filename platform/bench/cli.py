"""The `loraplex bench` command group; each benchmark lives in its own module."""

from __future__ import annotations

import importlib
from dataclasses import replace

import click

from loraplex.settings import Settings

BENCHMARKS = [
    ("loraplex.bench.api", "bench_api"),
    ("loraplex.bench.upload", "bench_upload"),
    ("loraplex.bench.gateway", "bench_gateway"),
    ("loraplex.bench.overload", "bench_overload"),
    ("loraplex.bench.parity", "bench_parity"),
    ("loraplex.bench.structured", "bench_structured"),
    ("loraplex.bench.pages", "bench_pages"),
    ("loraplex.bench.quiet", "bench_quiet"),
    ("loraplex.bench.base_model_pull", "bench_base_model_pull"),
    ("loraplex.bench.calibrate", "bench_calibrate"),
    ("loraplex.bench.overload_model", "bench_overload_model"),
    ("loraplex.bench.adapters", "bench_adapters"),
]


def own_state(settings: Settings) -> Settings:
    """`settings` with the benches' own database and data dir, under `var/bench/platform`,
    unless the operator chose either: a bench registers operators, tenants and its engine,
    and in the default database `loraplex up` would serve them (it routed the demo's
    requests to a bench's engine too)."""
    default = Settings()
    if settings.database_url != default.database_url or settings.data_dir != default.data_dir:
        return settings
    data_dir = default.data_dir / "bench" / "platform"
    data_dir.mkdir(parents=True, exist_ok=True)
    return replace(
        settings, data_dir=data_dir, database_url=f"sqlite+aiosqlite:///{data_dir / 'loraplex.db'}"
    )


@click.group()
@click.pass_context
def bench(ctx: click.Context) -> None:
    """Benchmarks: each prints a table and writes JSON, against a baseline in the same run."""
    if isinstance(ctx.obj, Settings):
        ctx.obj = own_state(ctx.obj)


for _module, _name in BENCHMARKS:
    try:
        bench.add_command(getattr(importlib.import_module(_module), _name))
    except ImportError:
        continue
