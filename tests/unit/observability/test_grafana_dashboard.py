"""deploy/observability/dashboard.json: Grafana can import it, it has the panels an operator
looks for, and every query parses and reads only series that exist."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.support import promql

PANELS_WANTED = (
    "TTFT", "Requests by status", "Streams ended early", "Demand: in flight and waiting",
    "Shed for load", "Engines answering", "Adapter loads", "Refused at admission",
    "Event-loop lag (p99)",
)  # fmt: skip


def _dashboard() -> dict[str, Any]:
    return json.loads(promql.DASHBOARD.read_text())


def _expressions(node: Any) -> Iterator[str]:
    """Every PromQL expression in the dashboard: panel targets, annotations, variables."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            elif key == "definition" and isinstance(value, str):
                yield from re.findall(r"label_values\((\w+)", value)
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def _for_promtool(expr: str) -> str:
    """Grafana's variables as Prometheus would see them once Grafana filled them in."""
    return expr.replace("$__rate_interval", "5m").replace("$rank_class", ".*")


def test_the_dashboard_is_grafana_json_with_the_operator_panels() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    titles = {p["title"] for p in dashboard["panels"] if p["type"] != "row"}
    assert set(PANELS_WANTED) <= titles
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in _dashboard()["panels"]:
        pos = panel["gridPos"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, panel["title"]
        assert pos["x"] + pos["w"] <= 24
        cells |= mine


def test_every_query_parses() -> None:
    expressions = {f"q{i}": _for_promtool(e) for i, e in enumerate(_expressions(_dashboard()))}
    promql.check_parse(expressions)


def test_every_query_reads_only_series_that_exist() -> None:
    known = (
        promql.registered_series()
        | promql.engine_series()
        | promql.recorded_series()
        | promql.PROMETHEUS_OWN
    )
    assert promql.unknown_series(_expressions(_dashboard()), known) == {}
