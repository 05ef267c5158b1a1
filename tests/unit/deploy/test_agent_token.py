"""No self-registering agent in a shipped manifest gets the shared `LORAPLEX_AGENT_TOKEN`.

An agent started with `--register-with` makes a secret of its own and accepts only that one
(docs/security.md, per-agent secrets). Handed the shared token as well, it would also accept
what every other such node holds: a node taken over could then call every agent. So the
agents of every Kubernetes render and of the Compose file must not be able to read it: not
in `env`, not through a ConfigMap, not through a whole Secret (`envFrom`), not from `.env`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy import support

SHARED_TOKEN = "LORAPLEX_AGENT_TOKEN"


def registers_itself(argv: list[str]) -> bool:
    """Whether `argv` (or the script it runs) starts `loraplex agent --register-with`."""
    for command in support.argv_commands(argv):
        args = support.loraplex_invocations(command)
        if args and args[0] == "agent" and "--register-with" in support.flags_of(args):
            return True
    return False


def k8s_token_sources(container: dict[str, Any], objects: tuple[dict[str, Any], ...]) -> list[str]:
    """Where `container` could read the shared token from."""
    sources = [f"env {e['name']}" for e in container.get("env", []) if e["name"] == SHARED_TOKEN]
    for source in container.get("envFrom", []):
        if "secretRef" in source:  # a whole Secret: whatever keys an operator put in it
            sources.append(f"envFrom Secret {source['secretRef']['name']}")
        elif "configMapRef" in source:
            name = source["configMapRef"]["name"]
            config = support.find(objects, "ConfigMap", name)
            if config is not None and SHARED_TOKEN in config.get("data", {}):
                sources.append(f"envFrom ConfigMap {name}")
    return sources


@pytest.mark.parametrize(
    "name", ["dev", "prod", "prod+servicemonitor+keda", "prod+node-model-cache"]
)
def test_kubernetes_agents_get_no_shared_token(name: str) -> None:
    objects = support.all_renders()[name]
    agents = 0
    for workload in support.workloads(objects):
        for container in support.containers(workload):
            if not registers_itself(support.k8s_argv(container)):
                continue
            agents += 1
            where = f"{name}: {workload['metadata']['name']} container {container['name']}"
            assert not k8s_token_sources(container, objects), where
    assert agents, f"{name}: no self-registering agent found"


def test_compose_agents_get_no_shared_token() -> None:
    agents = []
    for name, service in support.compose_model()["services"].items():
        if not registers_itself(support.compose_argv(service)):
            continue
        agents.append(name)
        assert SHARED_TOKEN not in service.get("environment", {}), f"compose {name}"
        assert "env_file" not in service, f"compose {name}: an env_file may carry the token"
    assert sorted(agents) == ["agent-cpu", "agent-r16", "agent-r64"]
