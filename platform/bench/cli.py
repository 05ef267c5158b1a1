"""The `loraplex bench` command group; each benchmark lives in its own module."""

from __future__ import annotations

import importlib

import click

BENCHMARKS = [
    ("loraplex.bench.api", "bench_api"),
    ("loraplex.bench.upload", "bench_upload"),
    ("loraplex.bench.gateway", "bench_gateway"),
    ("loraplex.bench.overload", "bench_overload"),
    ("loraplex.bench.parity", "bench_parity"),
    ("loraplex.bench.structured", "bench_structured"),
    ("loraplex.bench.pages", "bench_pages"),
    ("loraplex.bench.quiet", "bench_quiet"),
]


@click.group()
def bench() -> None:
    """Benchmarks: each prints a table and writes JSON, against a baseline in the same run."""


for _module, _name in BENCHMARKS:
    try:
        bench.add_command(getattr(importlib.import_module(_module), _name))
    except ImportError:
        continue
