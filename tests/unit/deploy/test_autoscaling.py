"""The keda and servicemonitor components: engines scale on the demand the API's gate sees
per rank class (not SGLang's queue, which the gate keeps short), no data is never read as
0, and the operator's values (Prometheus's address, its `release` label, the platform's
namespace) are set in one place each and reach every object."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.support import promql
from tests.unit.deploy import support

KEDA_VALUES = support.K8S / "components" / "keda" / "values.yaml"
MONITOR_VALUES = support.K8S / "components" / "servicemonitor" / "values.yaml"


def _objects(kind: str, objects: tuple[dict[str, Any], ...] | None = None) -> list[dict[str, Any]]:
    objects = objects if objects is not None else support.render_prod_with_optional_components()
    return [o for o in objects if o["kind"] == kind]


def _value(values_file: Path, key: str) -> str:
    return str(yaml.safe_load(values_file.read_text())["data"][key])


def _render_with_values(
    keda: dict[str, str], monitor: dict[str, str]
) -> tuple[dict[str, Any], ...]:
    """prod plus both components, from a copy of deploy/k8s whose values files say otherwise."""
    with tempfile.TemporaryDirectory() as tmp:
        k8s = Path(tmp) / "k8s"
        shutil.copytree(support.K8S, k8s)
        for path, data in ((k8s / "components/keda/values.yaml", keda),
                           (k8s / "components/servicemonitor/values.yaml", monitor)):  # fmt: skip
            values = yaml.safe_load(path.read_text())
            values["data"].update(data)
            path.write_text(yaml.safe_dump(values))
        here = Path(tmp) / "with-components"
        here.mkdir()
        rel = Path(os.path.relpath(k8s, here))
        (here / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [str(rel / "overlays" / "prod")],
                    "components": [
                        str(rel / "components" / "servicemonitor"),
                        str(rel / "components" / "keda"),
                    ],
                }
            )
        )
        return tuple(support._kustomize(here))


def test_every_rank_class_scales_on_its_own_demand_at_the_gate() -> None:
    engines = {
        sts["metadata"]["labels"]["loraplex.io/rank-class"]: sts["metadata"]["name"]
        for sts in _objects("StatefulSet")
        if sts["metadata"]["labels"].get("app.kubernetes.io/component") == "engine"
    }
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in _objects("ScaledObject")}
    assert set(scaled) == set(engines.values())
    for rank_class, name in engines.items():
        (trigger,) = scaled[name]["spec"]["triggers"]
        query = trigger["metadata"]["query"]
        assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
        assert query.count(f'rank_class="{rank_class}"') == 4
        assert promql.metric_names(query) == {
            "loraplex_rank_class_in_flight",
            "loraplex_rank_class_waiting",
            "loraplex_rank_class_shed_total",
            "loraplex_rank_class_admitted_total",
        }


def _promtool_case(query: str, series: dict[str, str], expected: list[dict[str, Any]]) -> str:
    """A `promtool test rules` file evaluating `query` over `series` 20 minutes in."""
    case = {
        "interval": "1m",
        "input_series": [{"series": k, "values": v} for k, v in series.items()],
        "promql_expr_test": [{"expr": query, "eval_time": "20m", "exp_samples": expected}],
    }
    return yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": [case]})


def _evaluate(query: str, series: dict[str, str], expected: list[dict[str, Any]]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        file.write(_promtool_case(query, series, expected))
        file.flush()
        result = subprocess.run(
            [promql.promtool(), "test", "rules", file.name],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _r16() -> tuple[str, str]:
    scaled = support.find(
        support.render_prod_with_optional_components(), "ScaledObject", "loraplex-engine-r16"
    )
    assert scaled is not None
    (trigger,) = scaled["spec"]["triggers"]
    return trigger["metadata"]["query"], trigger["metadata"]["threshold"]


def test_a_class_at_its_caps_and_shedding_asks_for_more_engines_than_it_runs() -> None:
    """Two r16 engines, each held at 16 in flight by the gates of two API pods, which shed
    one request for every two they admit: KEDA is asked for 4 engines, not 2."""
    query, threshold = _r16()
    labels = 'namespace="loraplex", rank_class="16"'
    series = {}
    for pod in ("api-a", "api-b"):
        at = f'{labels}, pod="{pod}"'
        series[f"loraplex_rank_class_in_flight{{{at}}}"] = "16x30"
        series[f"loraplex_rank_class_waiting{{{at}}}"] = "1x30"
        series[f'loraplex_rank_class_shed_total{{{at}, reason="engine_busy"}}'] = "0+30x30"
        series[f"loraplex_rank_class_admitted_total{{{at}}}"] = "0+60x30"
    expected_demand = (16 + 1) * 2 * 1.5
    _evaluate(query, series, [{"labels": "{}", "value": expected_demand}])
    assert math.ceil(expected_demand / float(threshold)) == 4


def test_a_quiet_class_asks_for_none_and_no_data_is_no_answer() -> None:
    query, _ = _r16()
    labels = 'namespace="loraplex", rank_class="16", pod="api-a"'
    quiet = {
        f"loraplex_rank_class_in_flight{{{labels}}}": "0x30",
        f"loraplex_rank_class_waiting{{{labels}}}": "0x30",
        f'loraplex_rank_class_shed_total{{{labels}, reason="engine_busy"}}': "0x30",
        f"loraplex_rank_class_admitted_total{{{labels}}}": "0x30",
    }
    _evaluate(query, quiet, [{"labels": "{}", "value": 0}])
    # Only another class's series: an empty answer, which KEDA counts as a failure.
    other = {k.replace('rank_class="16"', 'rank_class="64"'): v for k, v in quiet.items()}
    _evaluate(query, other, [])


def test_the_queries_parse_and_read_series_the_api_exports() -> None:
    queries = {
        f"{s['metadata']['name']}/{t['name']}": t["metadata"]["query"]
        for s in _objects("ScaledObject")
        for t in s["spec"]["triggers"]
    }
    assert promql.unknown_series(queries.values(), promql.registered_series()) == {}
    promql.check_parse(queries)


def test_no_data_is_an_error_that_holds_the_fallback_not_a_zero() -> None:
    for scaled in _objects("ScaledObject"):
        spec = scaled["spec"]
        for trigger in spec["triggers"]:
            assert trigger["metadata"]["ignoreNullValues"] == "false"
        fallback = spec["fallback"]
        assert spec["minReplicaCount"] <= fallback["replicas"] <= spec["maxReplicaCount"]
        # Autoscaling must not undo the two engines per class that a node drain needs.
        assert spec["minReplicaCount"] >= 2
        assert fallback["failureThreshold"] >= 1


def test_the_prometheus_address_is_the_keda_value() -> None:
    address = _value(KEDA_VALUES, "prometheus-address")
    for scaled in _objects("ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["metadata"]["serverAddress"] == address


def test_servicemonitors_carry_the_release_label_prometheus_selects() -> None:
    release = _value(MONITOR_VALUES, "release")
    monitors = _objects("ServiceMonitor")
    assert len(monitors) == 2
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == release


def test_the_queries_select_the_namespace_prod_runs_in() -> None:
    (prod_namespace,) = {
        o["metadata"]["namespace"]
        for o in support.render_overlay("prod")
        if o["kind"] == "Deployment"
    }
    assert _value(KEDA_VALUES, "namespace") == prod_namespace
    for scaled in _objects("ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["metadata"]["query"].count(f'namespace="{prod_namespace}"') == 4


def test_one_edit_of_each_values_file_reaches_every_object() -> None:
    objects = _render_with_values(
        {"prometheus-address": "http://prometheus.observability.svc:9090", "namespace": "lpx-eu"},
        {"release": "my-monitoring"},
    )
    triggers = [t for s in _objects("ScaledObject", objects) for t in s["spec"]["triggers"]]
    addresses = {t["metadata"]["serverAddress"] for t in triggers}
    assert addresses == {"http://prometheus.observability.svc:9090"}
    for trigger in triggers:
        query = trigger["metadata"]["query"]
        assert query.count('namespace="lpx-eu"') == 4 and query.count("namespace=") == 4
    promql.check_parse({f"q{n}": t["metadata"]["query"] for n, t in enumerate(triggers)})
    releases = {m["metadata"]["labels"]["release"] for m in _objects("ServiceMonitor", objects)}
    assert releases == {"my-monitoring"}
    assert not [
        o for o in objects if o["kind"] == "ConfigMap" and "values" in o["metadata"]["name"]
    ]
