"""Every `LORAPLEX_*` variable the deployment files name is a field of `Settings`.

A misspelt variable is silently ignored by `Settings.from_env()`, so a typo in a manifest
would deploy with the default. The scan is textual (every file under deploy/, /.dockerignore
and docs/deploy.md), so it also covers comments, scripts and docs; the structured checks
below also look at the keys the objects actually set.
"""

from __future__ import annotations

import dataclasses
import re

from loraplex.settings import PREFIX, Settings
from tests.unit.deploy import support

NAME = re.compile(r"\bLORAPLEX_[A-Z0-9_]*[A-Z0-9]\b")
SETTINGS = {PREFIX + f.name.upper() for f in dataclasses.fields(Settings)}
# Switches of the test suite's drills, which docs/deploy.md names beside their figures: read
# by the tests, never by a deployed process.
TEST_SWITCHES = {"LORAPLEX_REAL_ROLL"}


def test_every_named_variable_is_a_setting() -> None:
    unknown: dict[str, set[str]] = {}
    for path in support.deploy_text_files():
        for name in NAME.findall(path.read_text(errors="replace")):
            if name not in SETTINGS | TEST_SWITCHES:
                unknown.setdefault(name, set()).add(str(path.relative_to(support.ROOT)))
    assert not unknown, f"not fields of loraplex.settings.Settings: {unknown}"


def test_kubernetes_env_and_configmaps_set_only_settings() -> None:
    for render_name, objects in support.all_renders().items():
        for obj in objects:
            # loraplex-proxy holds uvicorn's FORWARDED_ALLOW_IPS, not a Loraplex setting.
            name = obj["metadata"]["name"]
            if obj["kind"] == "ConfigMap" and name.startswith("loraplex-") and "proxy" not in name:
                for key in obj.get("data", {}):
                    assert key in SETTINGS, f"{render_name}: ConfigMap key {key}"
        for workload in support.workloads(objects):
            for container in support.containers(workload):
                for env in container.get("env", []):
                    if env["name"].startswith(PREFIX):
                        assert env["name"] in SETTINGS, f"{render_name}: {env['name']}"


def test_compose_environment_sets_only_settings() -> None:
    for name, service in support.compose_model()["services"].items():
        environment = service.get("environment", {})
        keys = (
            environment if isinstance(environment, dict) else [e.split("=")[0] for e in environment]
        )
        for key in keys:
            if key.startswith(PREFIX):
                assert key in SETTINGS, f"compose service {name}: {key}"


def test_values_parse_as_their_settings() -> None:
    """Every LORAPLEX_* value set in a ConfigMap, env or Compose file has the field's type."""
    seen = 0
    renders = support.all_renders() if support.kubectl_available() else {}
    for render_name, objects in renders.items():
        values: dict[str, str] = {}
        for obj in objects:
            if obj["kind"] == "ConfigMap":
                values.update(obj.get("data", {}))
        for workload in support.workloads(objects):
            for container in support.containers(workload):
                for env in container.get("env", []):
                    if "value" in env:
                        values[env["name"]] = env["value"]
        settings = Settings.from_env({k: v for k, v in values.items() if k in SETTINGS})
        seen += len(values)
        assert str(settings.data_dir) == "/var/lib/loraplex", render_name
        assert settings.object_store == "s3", render_name
    for service in support.compose_model()["services"].values():
        environment = service.get("environment", {})
        if isinstance(environment, dict):
            Settings.from_env({k: str(v) for k, v in environment.items() if k in SETTINGS})
            seen += 1
    assert seen
