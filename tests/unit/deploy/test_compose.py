"""deploy/compose/compose.yaml is a valid Compose file, for each profile.

Compose interpolates `${...}` before it validates, so the file is interpolated here the same
way with .env.example's values (a `${VAR:?}` without a value fails, as in Compose), then
validated twice:

- against the official Compose Specification JSON schema (compose-spec/compose-spec's
  `compose-spec.json`, as vendored by `check-jsonschema`, run as its CLI);
- by `compose-spec`, Python bindings of the Rust `compose_spec` crate, a strict parser of
  the specification (unknown keys, malformed ports, durations, byte sizes and device
  requests fail).

Neither checks references between services, so the tests below do what `docker compose
config` does for those: depends_on and network_mode targets exist and are active in the same
profiles, named volumes are declared, build targets exist in the Dockerfiles.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy import support


def check_against_spec(model: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema's run of `model` against the Compose Specification schema it ships."""
    document = tmp_path / "compose.json"
    document.write_text(json.dumps(model))
    command = [sys.executable, "-m", "check_jsonschema", "--builtin-schema",
               "vendor.compose-spec", str(document)]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_validates_against_the_compose_specification_schema(tmp_path: Path) -> None:
    model = support.compose_model()
    result = check_against_spec(model, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_validation_rejects_a_broken_file(tmp_path: Path) -> None:
    model = support.compose_model()
    model["services"]["api"]["healthcheck"]["interval"] = {"not": "a duration"}
    result = check_against_spec(model, tmp_path)
    assert result.returncode != 0


def without_hooks(model: dict[str, Any]) -> dict[str, Any]:
    """`model` without `pre_stop` hooks: compose-spec's model predates them (Compose 2.30);
    the official schema above checks them."""
    for service in model["services"].values():
        service.pop("pre_stop", None)
    return model


def test_parses_with_the_compose_spec_parser() -> None:
    from compose_spec import PyCompose

    compose = PyCompose.from_json(json.dumps(without_hooks(support.compose_model())))
    compose.validate()
    assert set(compose.service_names()) == set(support.compose_model()["services"])


def test_compose_spec_parser_rejects_a_broken_file() -> None:
    from compose_spec import PyCompose

    for service, key, value in (
        ("api", "restart_policy", "always"),
        ("engine-r16", "shm_size", "lots"),
    ):
        model = without_hooks(support.compose_model())
        model["services"][service][key] = value
        with pytest.raises(ValueError):
            PyCompose.from_json(json.dumps(model))


def test_env_example_provides_every_variable() -> None:
    text = support.COMPOSE_FILE.read_text()
    referenced = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text))
    documented = set(support.read_env_file(support.ENV_EXAMPLE))
    assert referenced <= documented, f"not in .env.example: {sorted(referenced - documented)}"
    with pytest.raises(support.MissingVariable):
        support.compose_model(env={})  # the secrets are required (${VAR:?...})


def _named_volume(source: str) -> bool:
    return not source.startswith(("/", ".", "~"))


@pytest.mark.parametrize(
    "profiles", support.COMPOSE_PROFILES, ids=lambda p: "+".join(sorted(p)) or "none"
)
def test_references_resolve_in_each_profile(profiles: frozenset[str]) -> None:
    model = support.compose_model()
    active = support.active_services(model, profiles)
    declared_volumes = set(model.get("volumes", {}))
    for name, service in active.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in active, (
                f"{name} depends on {dependency}, not active with {set(profiles)}"
            )
        network_mode = service.get("network_mode", "")
        if network_mode.startswith("service:"):
            target = network_mode.removeprefix("service:")
            assert target in active, f"{name}: network_mode {network_mode}"
            assert "ports" not in service and "networks" not in service, name
        for volume in service.get("volumes", []):
            source = (
                volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            )
            if source and _named_volume(source):
                assert source in declared_volumes, f"{name}: volume {source} is not declared"


def test_profiles_run_the_right_engines() -> None:
    model = support.compose_model()
    engines = {
        frozenset(p): {n for n in support.active_services(model, p) if n.startswith("engine-")}
        for p in support.COMPOSE_PROFILES
    }
    assert engines[frozenset()] == set()
    assert engines[frozenset({"cpu"})] == {"engine-cpu"}
    assert engines[frozenset({"gpu"})] == {"engine-r16", "engine-r64"}
    for profiles in support.COMPOSE_PROFILES:
        active = support.active_services(model, profiles)
        for required in (
            "postgres",
            "redis",
            "minio",
            "minio-init",
            "migrate",
            "api",
            "worker-default",
            "beat",
        ):
            assert required in active
        for name in active:
            if name.startswith("engine-"):
                assert f"agent-{name.removeprefix('engine-')}" in active


def test_platform_wiring() -> None:
    services = support.compose_model()["services"]
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["minio-init"]["image"].startswith("minio/mc:")
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    migrate = support.compose_argv(services["migrate"])
    assert migrate[:2] == ["/bin/sh", "-ec"]
    assert "wait_for_schema.py --reachable" in migrate[2] and "loraplex db upgrade" in migrate[2]
    assert support.compose_argv(services["beat"]) == ["loraplex", "beat"]
    for name, service in services.items():
        if name.startswith("engine-r"):
            assert service["image"] == f"lmsysorg/sglang:v{_sglang_version()}"
            assert service["shm_size"]
            assert "/health" in " ".join(service["healthcheck"]["test"])
            assert any(v.startswith("models:") or ":/models" in v for v in service["volumes"])
        if name.startswith(("engine-r", "worker-train")) and name != "worker-train-cpu":
            (device,) = service["deploy"]["resources"]["reservations"]["devices"]
            assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name
        if name.startswith("agent-"):
            engine = support.compose_engine_of(name)
            cache = next(v for v in service["volumes"] if v.endswith(":/var/lib/loraplex/cache"))
            assert f"{cache}:ro" in services[engine]["volumes"], (
                f"{name} and {engine} share no cache"
            )


def _sglang_version() -> str:
    from loraplex.serving.engines.launch_sglang import SGLANG_VERSION

    return SGLANG_VERSION


def test_build_targets_exist() -> None:
    import dockerfile

    for name, service in support.compose_model()["services"].items():
        build: Any = service.get("build")
        if not build:
            continue
        path = (support.COMPOSE_DIR / build["context"] / build["dockerfile"]).resolve()
        assert path in {p.resolve() for p in support.DOCKERFILES}, name
        stages = {
            i.value[2]
            for i in dockerfile.parse_file(str(path))
            if i.cmd == "FROM" and len(i.value) > 2
        }
        if "target" in build:
            assert build["target"] in stages, f"{name}: no stage {build['target']} in {path.name}"
