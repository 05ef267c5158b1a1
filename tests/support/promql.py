"""What the observability tests need to check PromQL offline: the metric names an expression
reads, every name the code registers (and the engines' documented ones), and promtool."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OBSERVABILITY = ROOT / "deploy" / "observability"
RULES = OBSERVABILITY / "rules.yaml"
DASHBOARD = OBSERVABILITY / "dashboard.json"
ENGINES_DOC = ROOT / "docs" / "engines.md"
PROMTOOL_MISSING = (
    "promtool is not installed: `make prometheus` (deploy/local/prometheus.sh) installs "
    "Debian's prometheus package"
)
# Every module that registers Loraplex metrics on the default registry.
METRIC_MODULES = (
    "loraplex.observability.metrics",
    "loraplex.gateway.admission.service",
    "loraplex.workers.task",
)
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "gauge": ("",),
}
PROMETHEUS_OWN = {"up", "ALERTS", "scrape_duration_seconds", "scrape_samples_scraped"}
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
}  # fmt: skip
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def promtool() -> str:
    """promtool's path, or the test skips saying how to install it."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(PROMTOOL_MISSING)
    return path


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (not functions, keywords or labels)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values, regexes
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)  # label lists of by/without/on/ignoring/group_*
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    names = set()
    for match in _IDENT.finditer(text):
        name, after = match.group(), text[match.end() :].lstrip()
        if after.startswith("(") or name.lower() in _KEYWORDS:
            continue  # a function call or an operator
        if re.fullmatch(r"\d+[smhdwy]", name):
            continue
        names.add(name)
    return names


def registered_series() -> set[str]:
    """Every series name Loraplex's code can expose, from the families it registers."""
    from prometheus_client import REGISTRY

    for module in METRIC_MODULES:
        importlib.import_module(module)
    names: set[str] = set()
    for family in REGISTRY.collect():
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def engine_series() -> set[str]:
    """The engines' own series docs/engines.md documents (`sglang:...`, `vllm:...`)."""
    return set(re.findall(r"`((?:sglang|vllm):[a-z_]+)`", ENGINES_DOC.read_text()))


def recorded_series(rules_file: Path = RULES) -> set[str]:
    """The names the recording rules in `rules_file` produce."""
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def rule_expressions(rules_file: Path = RULES) -> dict[str, str]:
    """Each rule's name (record or alert) -> its expression."""
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {
        rule.get("record") or rule["alert"]: rule["expr"]
        for group in groups
        for rule in group["rules"]
    }


def unknown_series(expressions: Iterable[str], known: set[str]) -> dict[str, set[str]]:
    """Expression -> the series it reads that `known` lacks (only those with any)."""
    missing = {expr: metric_names(expr) - known for expr in expressions}
    return {expr: names for expr, names in missing.items() if names}


def check_parse(expressions: dict[str, str]) -> None:
    """Fail with promtool's words unless every expression parses (each is put into a
    recording rule, which `promtool check rules` parses)."""
    rules = [
        {"record": f"check:expr_{i}", "expr": expr, "labels": {"from": name[:60]}}
        for i, (name, expr) in enumerate(expressions.items())
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}, file)
        file.flush()
        result = subprocess.run(
            [promtool(), "check", "rules", file.name],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
