"""Shared readers for the deployment tests: rendered Kubernetes objects, the interpolated
Compose file, Dockerfiles, and every command line the deployment files run.

Everything here is offline: `kubectl kustomize` renders without a cluster, Compose files are
interpolated here exactly as `docker compose` does before validating (values from
.env.example), and nothing is built or started.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE_DIR = DEPLOY / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
IMAGES = DEPLOY / "images"
DOCKERFILES = [IMAGES / "Dockerfile", IMAGES / "Dockerfile.train"]
DEPLOY_DOC = ROOT / "docs" / "deploy.md"

OVERLAYS = ["dev", "prod"]
NAMESPACES = {"dev": "loraplex-dev", "prod": "loraplex"}
COMPOSE_PROFILES: list[frozenset[str]] = [frozenset(), frozenset({"cpu"}), frozenset({"gpu"})]

# The ports the processes listen on, everywhere (README, docs/deploy.md).
API_PORT = 8000
AGENT_PORT = 8200
ENGINE_PORT = 30000

# Images built from deploy/images (ENTRYPOINT ["loraplex"]).
LORAPLEX_IMAGES = {"loraplex", "loraplex-worker", "loraplex-train"}
SECRET_WORDS = ("SECRET", "PASSWORD", "TOKEN", "KEY")


# ---- Kubernetes -----------------------------------------------------------------------------


KUBECTL_MISSING = "kubectl is not installed: the Kustomize overlays cannot be rendered here"


def kubectl_available() -> bool:
    return shutil.which("kubectl") is not None


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip(KUBECTL_MISSING)
    return path


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.cache
def render_overlay(name: str) -> tuple[dict[str, Any], ...]:
    """The objects `kubectl kustomize deploy/k8s/overlays/<name>` renders."""
    return tuple(_kustomize(K8S / "overlays" / name))


def overlay_images(overlay: str) -> list[dict[str, str]]:
    """The `images:` of an overlay's kustomization.yaml."""
    text = (K8S / "overlays" / overlay / "kustomization.yaml").read_text()
    return list(yaml.safe_load(text).get("images", []))


@functools.cache
def render_with_components(overlay: str, components: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """An overlay plus optional components (names under deploy/k8s/components), as docs/deploy.md
    adds them."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        rel = Path(os.path.relpath(K8S, here))  # kustomize refuses absolute paths
        (here / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "namespace": NAMESPACES[overlay],
                    "resources": [str(rel / "overlays" / overlay)],
                    "components": [str(rel / "components" / name) for name in components],
                    # as when listed in the overlay itself: its images apply to what they add
                    "images": overlay_images(overlay),
                }
            )
        )
        return tuple(_kustomize(here))


def render_prod_with_optional_components() -> tuple[dict[str, Any], ...]:
    """prod plus the servicemonitor and keda components."""
    return render_with_components("prod", ("servicemonitor", "keda"))


def all_renders() -> dict[str, tuple[dict[str, Any], ...]]:
    renders = {name: render_overlay(name) for name in OVERLAYS}
    renders["prod+servicemonitor+keda"] = render_prod_with_optional_components()
    renders["prod+node-model-cache"] = render_with_components("prod", ("node-model-cache",))
    return renders


WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job", "DaemonSet"}


def workloads(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in WORKLOAD_KINDS]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"].get("labels", {})


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def find(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any] | None:
    for o in objects:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    return None


def image_name(image: str) -> str:
    """`registry.example.com/loraplex/loraplex-worker:0.1.0` -> `loraplex-worker`."""
    last = image.rsplit("/", 1)[-1]
    return last.split("@", 1)[0].split(":", 1)[0]


def image_tag(image: str) -> str | None:
    last = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return last.split(":", 1)[1] if ":" in last else None


def container_ports(container: dict[str, Any]) -> dict[str, int]:
    """Port name (or str(number)) -> number, for the container's declared ports."""
    ports: dict[str, int] = {}
    for port in container.get("ports", []):
        ports[str(port["containerPort"])] = port["containerPort"]
        if "name" in port:
            ports[port["name"]] = port["containerPort"]
    return ports


def probe_port(container: dict[str, Any], probe: dict[str, Any]) -> int | None:
    action = probe.get("httpGet") or probe.get("tcpSocket")
    if action is None:
        return None
    port = action["port"]
    return container_ports(container).get(str(port), port if isinstance(port, int) else None)


# The agents' wrapper: a shell that reads the node credential from a file, then
# `exec loraplex "$@"` with the arguments after its $0 (deploy/k8s/rank-classes/engine).
WRAPPER_TAIL = 'exec loraplex "$@"'


def unwrap(argv: list[str]) -> list[str]:
    """`loraplex ARGS` for the credential wrapper (`sh -c '... exec loraplex "$@"' $0 ARGS`)."""
    is_shell = len(argv) >= 4 and argv[0] in SHELLS and argv[1] == "-c"
    if is_shell and argv[2].rstrip().endswith(WRAPPER_TAIL):
        return ["loraplex", *argv[4:]]
    return argv


def k8s_argv(container: dict[str, Any]) -> list[str]:
    """The container's command line: command + args (the image's entrypoint when no command)."""
    command = container.get("command")
    args = container.get("args", [])
    if command is None and image_name(container["image"]) in LORAPLEX_IMAGES:
        return ["loraplex", *args]
    return unwrap([*(command or []), *args])


# ---- Compose ---------------------------------------------------------------------------------


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {line!r}"
        values[key.strip()] = value.strip()
    return values


_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(KeyError):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation: $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e}, ..."""

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["named"]
        op, arg = match["op"], match["arg"] or ""
        value = env.get(name)
        if op is None:
            return value or ""
        unset_or_empty = value is None or (op.startswith(":") and value == "")
        if op.endswith("-"):
            return arg if unset_or_empty else str(value)
        if op.endswith("?"):
            if unset_or_empty:
                raise MissingVariable(f"{name}: {arg}")
            return str(value)
        return "" if unset_or_empty else arg  # "+"

    return _INTERPOLATION.sub(replace, text)


def interpolate_tree(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env) for key, value in node.items()}
    return node


def compose_raw() -> dict[str, Any]:
    """compose.yaml as YAML (anchors and merge keys resolved), not interpolated."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def compose_model(env: dict[str, str] | None = None) -> dict[str, Any]:
    """compose.yaml interpolated with .env.example's values (what Compose validates)."""
    return interpolate_tree(compose_raw(), read_env_file(ENV_EXAMPLE) if env is None else env)


def active_services(model: dict[str, Any], profiles: frozenset[str]) -> dict[str, Any]:
    """The services `docker compose --profile ...` starts: no profiles, or an enabled one."""
    return {
        name: service
        for name, service in model["services"].items()
        if not service.get("profiles") or profiles & set(service["profiles"])
    }


def compose_engine_of(agent_name: str) -> str:
    """The engine service of a Compose agent: agent-r16 -> engine-r16 (they share node-r16)."""
    return "engine-" + agent_name.removeprefix("agent-")


def compose_argv(service: dict[str, Any]) -> list[str]:
    """The service's command line: entrypoint + command (loraplex for our images)."""
    entrypoint = service.get("entrypoint")
    command = service.get("command", [])
    if isinstance(command, str):
        command = shlex.split(command)
    if entrypoint is None and image_name(service.get("image", "")) in LORAPLEX_IMAGES:
        return ["loraplex", *command]
    if isinstance(entrypoint, str):
        entrypoint = shlex.split(entrypoint)
    return unwrap([*(entrypoint or []), *command])


# ---- command lines -----------------------------------------------------------------------------

SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env"}
SHELL_WORDS = {"then", "else", "do", "!", "{", "(", "exec", "elif"}


def shell_commands(script: str) -> Iterator[list[str]]:
    """The simple commands of a shell script: split on ; && || | ( ) and line ends."""
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        segment: list[str] = []
        for token in lexer:
            if token and set(token) <= set(";&|()"):
                if segment:
                    yield segment
                segment = []
                continue
            segment.append(token)
        if segment:
            yield segment


def argv_commands(argv: list[str]) -> Iterator[list[str]]:
    """`argv` itself, or the commands of its script when it runs a shell with -c."""
    if argv and Path(argv[0]).name in {Path(s).name for s in SHELLS}:
        for i, arg in enumerate(argv[1:], 1):
            if arg.startswith("-") and "c" in arg:
                if i + 1 < len(argv):
                    yield from shell_commands(argv[i + 1])
                return
        return
    yield argv


def _is_loraplex(token: str) -> bool:
    return token == "loraplex" or token.endswith("/bin/loraplex")


def loraplex_invocations(command: list[str]) -> list[str] | None:
    """The arguments after `loraplex` if `command` runs it, else None.

    `loraplex ...` itself, or through `kubectl exec POD -- loraplex ...` and
    `docker compose exec|run SERVICE loraplex ...`.
    """
    while command and command[0] in SHELL_WORDS:
        command = command[1:]
    if command and _is_loraplex(command[0]):
        return command[1:]
    for i, token in enumerate(command[1:], 1):
        through_tool = command[0] in {"docker", "kubectl"} or command[i - 1] == "--"
        if through_tool and _is_loraplex(token):
            return command[i + 1 :]
    return None


@dataclass
class Invocation:
    where: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def k8s_commands() -> Iterator[Invocation]:
    """Every command line of every container of every render (none without kubectl)."""
    if not kubectl_available():
        return
    for render_name, objects in all_renders().items():
        for workload in workloads(objects):
            for container in containers(workload):
                where = f"{render_name}: {workload['kind']}/{workload['metadata']['name']}"
                for argv in argv_commands(k8s_argv(container)):
                    yield Invocation(f"{where} container {container['name']}", argv)


def compose_commands() -> Iterator[Invocation]:
    for name, service in compose_model()["services"].items():
        for argv in argv_commands(compose_argv(service)):
            yield Invocation(f"compose service {name}", argv)
        test = service.get("healthcheck", {}).get("test")
        if isinstance(test, list) and test and test[0] in {"CMD", "CMD-SHELL"}:
            argv = test[1:] if test[0] == "CMD" else ["sh", "-c", test[1]]
            for command in argv_commands(argv):
                yield Invocation(f"compose service {name} healthcheck", command)


def dockerfile_commands() -> Iterator[Invocation]:
    import dockerfile

    for path in DOCKERFILES:
        entrypoint: list[str] = []
        stage_entrypoints: dict[str, list[str]] = {}
        stage = ""
        for instruction in dockerfile.parse_file(str(path)):
            if instruction.cmd == "FROM":
                parent = instruction.value[0]
                stage = instruction.value[2] if len(instruction.value) > 2 else parent
                entrypoint = list(stage_entrypoints.get(parent, []))
                stage_entrypoints[stage] = entrypoint
            elif instruction.cmd == "ENTRYPOINT" and instruction.json:
                entrypoint = list(instruction.value)
                stage_entrypoints[stage] = entrypoint
            elif instruction.cmd == "CMD" and instruction.json:
                where = f"{path.name} CMD (stage {stage})"
                yield Invocation(where, [*entrypoint, *instruction.value])
            elif instruction.cmd == "RUN":
                for command in shell_commands(" ".join(instruction.value)):
                    yield Invocation(f"{path.name} RUN", command)


def script_commands() -> Iterator[Invocation]:
    """Shell scripts under deploy/ and the fenced sh blocks of docs/deploy.md."""
    for path in sorted(DEPLOY.rglob("*.sh")):
        for command in shell_commands(path.read_text()):
            yield Invocation(str(path.relative_to(ROOT)), command)
    in_block = False
    block: list[str] = []
    for line in DEPLOY_DOC.read_text().splitlines():
        if line.startswith("```"):
            if in_block:
                for command in shell_commands("\n".join(block)):
                    yield Invocation("docs/deploy.md", command)
                block = []
            in_block = line.strip() in {"```sh", "```bash"}
            continue
        if in_block:
            block.append(line)


def every_command() -> list[Invocation]:
    return [
        *k8s_commands(),
        *compose_commands(),
        *dockerfile_commands(),
        *script_commands(),
    ]


def flags_of(argv: list[str]) -> list[str]:
    """The `--long-option` names of a command line (`--a=b` counts as `--a`)."""
    return [token.split("=", 1)[0] for token in argv if token.startswith("--")]


def option_value(argv: list[str], flag: str) -> str | None:
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None


def deploy_text_files() -> list[Path]:
    """Every text file under deploy/ (plus /.dockerignore and docs/deploy.md)."""
    files = [p for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sorted([*files, ROOT / ".dockerignore", DEPLOY_DOC])
