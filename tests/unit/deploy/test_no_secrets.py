"""No secret value is written in any deployment file.

Kubernetes: no Secret object at all (Secrets are created outside the repository and named
only), no env var whose name says SECRET/PASSWORD/TOKEN/KEY with a literal `value`, no such
key in a ConfigMap, no credentials inside a URL. Compose: such variables are `${VAR}`
references without a default, filled from .env; .env.example holds only change-me
placeholders. Dockerfiles: no ENV/ARG of that kind. Everything: no private key, no cloud
access key id.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.deploy import support

CREDENTIALS_IN_URL = re.compile(r"://[^/\s:@]+:(\$\{[^}]*\}|[^/\s@]+)@")
REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}$")


def secret_like(name: str) -> bool:
    return any(word in name.upper() for word in support.SECRET_WORDS)


@pytest.mark.parametrize("name", ["dev", "prod", "prod+servicemonitor+keda"])
def test_kubernetes_objects_hold_no_secret(name: str) -> None:
    for obj in support.all_renders()[name]:
        where = f"{name}: {obj['kind']}/{obj['metadata']['name']}"
        assert obj["kind"] != "Secret", f"{where}: Secrets are created outside the repository"
        if obj["kind"] == "ConfigMap":
            for key, value in obj.get("data", {}).items():
                assert not secret_like(key), f"{where}: {key} belongs in the Secret"
                assert not CREDENTIALS_IN_URL.search(value), f"{where}: {key} holds credentials"
        if obj["kind"] in support.WORKLOAD_KINDS:
            for container in support.containers(obj):
                for env in container.get("env", []):
                    if "value" in env:
                        assert not secret_like(env["name"]), f"{where}: {env['name']} is literal"
                        assert not CREDENTIALS_IN_URL.search(env["value"]), where


def _environment(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        return dict(e.split("=", 1) for e in environment)
    return {k: str(v) for k, v in environment.items()}


def test_compose_takes_secrets_from_env_file() -> None:
    raw = support.compose_raw()
    for name, service in raw["services"].items():
        for key, value in _environment(service).items():
            if secret_like(key):
                assert REFERENCE.match(value), f"compose {name}: {key}={value!r} is not a ${{VAR}}"
            match = CREDENTIALS_IN_URL.search(value)
            if match:
                assert REFERENCE.match(match.group(1)), f"compose {name}: {key} embeds a password"


def test_env_example_holds_placeholders_only() -> None:
    for key, value in support.read_env_file(support.ENV_EXAMPLE).items():
        if secret_like(key):
            assert "change-me" in value, f".env.example: {key} must be a change-me placeholder"


def test_dockerfiles_hold_no_secret() -> None:
    import dockerfile

    for path in support.DOCKERFILES:
        for instruction in dockerfile.parse_file(str(path)):
            if instruction.cmd in {"ENV", "ARG"}:
                names = instruction.value[::2] if instruction.cmd == "ENV" else instruction.value
                for name in names:
                    assert not secret_like(name.split("=")[0]), (
                        f"{path.name}: {instruction.original}"
                    )


def test_no_key_material_anywhere() -> None:
    patterns = [
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
        re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
        re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    ]
    for path in support.deploy_text_files():
        text = path.read_text(errors="replace")
        for pattern in patterns:
            assert not pattern.search(text), f"{path}: {pattern.pattern}"


def test_scripts_generate_their_secrets() -> None:
    for path in sorted(support.DEPLOY.rglob("*.sh")):
        for name, value in re.findall(r"--from-literal=([A-Z_]+)=(\S+)", path.read_text()):
            if secret_like(name):
                assert value.startswith('"$('), f"{path.name}: {name} is not generated"
