"""deploy/observability/rules.yaml: Prometheus loads it, each alert fires on the failure it
names and not on a healthy platform (`promtool test rules`), and it reads only series that
exist."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import promql

CASES = Path(__file__).parent / "promtool" / "rules_test.yaml"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promql.promtool(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_prometheus_accepts_the_rules() -> None:
    result = _run("check", "rules", str(promql.RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_alert_fires_on_its_failure_and_not_on_a_healthy_platform() -> None:
    result = _run("test", "rules", str(CASES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_read_only_series_that_exist() -> None:
    known = (
        promql.registered_series()
        | promql.engine_series()
        | promql.recorded_series()
        | promql.PROMETHEUS_OWN
    )
    assert promql.unknown_series(promql.rule_expressions().values(), known) == {}


def test_every_alert_the_docs_promise_exists() -> None:
    alerts = {
        name
        for name in promql.rule_expressions()
        if not name.startswith(("loraplex:", "rank_class:", "instance:"))
    }
    assert {
        "LoraplexErrorBudgetBurn", "LoraplexTTFTBudgetBurn", "LoraplexEngineDown",
        "LoraplexAdapterLoadFailures", "LoraplexTenantQuotaExhausted", "LoraplexEventLoopLag",
        "LoraplexAPINotScraped",
    } <= alerts  # fmt: skip


def test_the_name_check_catches_a_metric_that_does_not_exist() -> None:
    known = promql.registered_series()
    expr = "sum(rate(loraplex_inference_requests_total[5m])) / sum(rate(loraplex_no_such_thing_total[5m]))"
    assert promql.unknown_series([expr], known) == {expr: {"loraplex_no_such_thing_total"}}
