"""The simulator's table and JSON output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS: tuple[tuple[str, str], ...] = (
    ("policy", "{}"),
    ("cold_loads", "{:,}"),
    ("host_loads", "{:,}"),
    ("gpu_swaps", "{:,}"),
    ("hit_active", "{:.1%}"),
    ("hit_loaded", "{:.1%}"),
    ("hit_disk", "{:.1%}"),
    ("hit_cold", "{:.1%}"),
    ("ttft_p50_s", "{:.3f}"),
    ("ttft_p99_s", "{:.3f}"),
    ("others_ttft_p99_s", "{:.3f}"),
    ("goodput_rps", "{:.2f}"),
    ("max_tenant_p99_s", "{:.3f}"),
    ("deferred", "{:,}"),
    ("resident_per_slot_gb", "{:.2f}"),
    ("wall_s", "{:.1f}"),
)
OPTIONAL = (("others_p99_ratio", "{:.3f}"),)


def _cells(row: dict[str, Any], columns: tuple[tuple[str, str], ...]) -> list[str]:
    flat = {**row, **{f"hit_{k}": v for k, v in row["hit_ratio"].items()}}
    return [fmt.format(flat[key]) for key, fmt in columns]


def table(rows: list[dict[str, Any]]) -> str:
    """Rows as an aligned text table; optional columns appear when every row has them."""
    columns = COLUMNS + tuple(c for c in OPTIONAL if all(c[0] in r for r in rows))
    header = [key for key, _ in columns]
    body = [_cells(row, columns) for row in rows]
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in body]
    return "\n".join(lines)


def write_json(
    path: Path, scenario: str, params: dict[str, Any], rows: list[dict[str, Any]]
) -> None:
    """Everything measured, for later comparison."""
    payload = {"scenario": scenario, "params": params, "rows": rows}
    path.write_text(json.dumps(payload, indent=2, default=str))
