"""The simulator's table and JSON output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loraplex.serving.simulator.seeds import Gap, PassCount

COLUMNS: tuple[tuple[str, str], ...] = (
    ("policy", "{}"),
    ("cold_loads", "{:,}"),
    ("cold_load_bound", "{:,}"),
    ("x_bound", "{:.2f}x"),
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
    ("rejected", "{:,}"),
    ("resident_per_slot_gb", "{:.2f}"),
    ("wall_s", "{:.1f}"),
)
# Scan rows: others' p99 without the scanner in the same policy, and the ratio. Gated and
# uploads rows: the TTFT of each adapter's first request, what loading ahead changes.
OPTIONAL = (
    ("others_p99_without_scanner_s", "{:.3f}"),
    ("others_p99_ratio", "{:.2f}x"),
    ("first_ttft_p50_s", "{:.3f}"),
    ("first_ttft_p99_s", "{:.3f}"),
)


def _cells(row: dict[str, Any], columns: tuple[tuple[str, str], ...]) -> list[str]:
    flat = {**row, **{f"hit_{k}": v for k, v in row["hit_ratio"].items()}}
    return [fmt.format(flat[key]) for key, fmt in columns]


def table(rows: list[dict[str, Any]]) -> str:
    """Rows as an aligned text table; optional columns appear when every row has them."""
    extra = tuple(c for c in OPTIONAL if all(c[0] in r for r in rows))
    at = [key for key, _ in COLUMNS].index("others_ttft_p99_s") + 1
    columns = COLUMNS[:at] + extra + COLUMNS[at:]  # next to the p99 they compare with
    return _aligned([key for key, _ in columns], [_cells(row, columns) for row in rows])


def write_json(path: Path, scenario: str, records: list[dict[str, Any]]) -> None:
    """Everything measured, for later comparison: one record per scenario run."""
    payload = {"scenario": scenario, "runs": records}
    path.write_text(json.dumps(payload, indent=2, default=str))


def _aligned(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in body)) for i, h in enumerate(header)]
    lines = [header, *body]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines
    )


def gap_table(gaps: list[Gap]) -> str:
    """Each scenario's policies: cold loads as a multiple of the bound, mean and worst."""
    seeds = max((g.seeds for g in gaps), default=0)
    header = ["scenario", "policy", "mean x bound", "worst x bound", "seeds"]
    body = [
        [g.scenario, g.policy, f"{g.mean:.2f}x", f"{g.worst:.2f}x", f"{g.seeds}/{seeds}"]
        for g in gaps
    ]
    return _aligned(header, body) if body else "(no scenario run)"


def pass_table(counts: list[PassCount]) -> str:
    """Each target: how many seeds passed it."""
    header = ["scenario", "target", "seeds passing"]
    body = [[c.scenario, c.target, f"{c.passed}/{c.seeds}"] for c in counts]
    return _aligned(header, body) if body else "(no targets)"
