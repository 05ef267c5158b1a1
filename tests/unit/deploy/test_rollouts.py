"""The deployment stays up through rollouts, node drains and dependency blips.

Engines drain through their agent before SIGTERM, within a grace period that covers the
longest stream; prod keeps two engines per rank class on different nodes under a PDB; agents
read settings of their own, so an API setting does not roll the GPU engines; the API runs
one process per pod (its /metrics is that process's); its readiness does not hang on
PostgreSQL or Redis; the hostile-tenant credentials are wired everywhere.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from loraplex.settings import Settings
from tests.unit.deploy import support

needs_kubectl = pytest.mark.skipif(not support.kubectl_available(), reason=support.KUBECTL_MISSING)
DRAIN_URL = "http://127.0.0.1:8200/drain"
SHUTDOWN_MARGIN_S = 30  # at least this much of the grace period is left for the shutdown
# What agents and base-model pulls may read: the object store, their data dir, the drain.
AGENT_SETTINGS = {
    "LORAPLEX_OBJECT_STORE", "LORAPLEX_S3_ENDPOINT_URL", "LORAPLEX_S3_BUCKET",
    "LORAPLEX_S3_REGION", "LORAPLEX_DATA_DIR", "LORAPLEX_TOTAL_TIMEOUT_S",
    "LORAPLEX_AGENT_HEARTBEAT_S", "LORAPLEX_DISK_CACHE_BYTES",
}  # fmt: skip


def engines(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [
        w
        for w in support.workloads(objects)
        if support.pod_labels(w).get("app.kubernetes.io/component") == "engine"
    ]


def config_map(objects: tuple[dict[str, Any], ...], prefix: str) -> dict[str, str]:
    (found,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and re.fullmatch(prefix + r"(-[a-z0-9]{10})?", o["metadata"]["name"])
    ]
    return dict(found["data"])


def stream_limit_s() -> float:
    return Settings().total_timeout_s


@needs_kubectl
@pytest.mark.parametrize("name", support.OVERLAYS)
def test_engines_drain_before_they_stop(name: str) -> None:
    objects = support.render_overlay(name)
    agent_config = config_map(objects, "loraplex-agent-config")
    drain_wait = float(agent_config.get("LORAPLEX_TOTAL_TIMEOUT_S", stream_limit_s()))
    assert drain_wait == stream_limit_s()
    for engine in engines(objects):
        spec = support.pod_spec(engine)
        (server,) = spec["containers"]
        command = server["lifecycle"]["preStop"]["exec"]["command"]
        assert command[:2] == ["python3", "-c"], "SGLang's image has python3, maybe not curl"
        assert DRAIN_URL in command[2] and "method='POST'" in command[2]
        compile(command[2], "preStop", "exec")  # the hook is valid Python
        grace = spec["terminationGracePeriodSeconds"]
        assert grace >= drain_wait + SHUTDOWN_MARGIN_S, engine["metadata"]["name"]


def test_compose_engines_drain_before_they_stop() -> None:
    services = support.compose_model()["services"]
    for name, service in services.items():
        if not name.startswith("engine-"):
            continue
        (hook,) = service["pre_stop"]
        assert DRAIN_URL in " ".join(hook["command"]), name
        compile(hook["command"][2], "pre_stop", "exec")
        grace = int(service["stop_grace_period"].removesuffix("s"))
        assert grace >= stream_limit_s() + SHUTDOWN_MARGIN_S, name
        # The engine stops before its agent, which must still answer the drain.
        assert support.compose_engine_of(name.replace("engine-", "agent-")) == name
        assert name.replace("engine-", "agent-") in service["depends_on"], name


@needs_kubectl
def test_prod_keeps_an_engine_of_each_class_through_a_node_drain() -> None:
    objects = support.render_overlay("prod")
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    for engine in engines(objects):
        where = engine["metadata"]["name"]
        labels = support.pod_labels(engine)
        assert engine["spec"]["replicas"] >= 2, where
        (term,) = support.pod_spec(engine)["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["topologyKey"] == "kubernetes.io/hostname", where
        selector = term["labelSelector"]["matchLabels"]
        assert support.selector_matches(selector, labels), where
        assert selector["loraplex.io/rank-class"] == labels["loraplex.io/rank-class"], where
        (budget,) = [
            b
            for b in budgets
            if support.selector_matches(b["spec"]["selector"]["matchLabels"], labels)
        ]
        assert budget["spec"].get("maxUnavailable") == 1, where
        assert "minAvailable" not in budget["spec"], where


@needs_kubectl
@pytest.mark.parametrize("name", support.OVERLAYS)
def test_agents_read_only_their_own_settings(name: str) -> None:
    objects = support.render_overlay(name)
    agent_config = config_map(objects, "loraplex-agent-config")
    api_config = config_map(objects, "loraplex-config")
    assert set(agent_config) <= AGENT_SETTINGS
    for key in set(agent_config) & set(api_config):
        assert agent_config[key] == api_config[key], f"{name}: {key} differs between the two"
    for engine in engines(objects):
        for container in support.containers(engine):
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef", {}).get("name", "")
                assert ref.startswith("loraplex-agent-config"), (engine["metadata"]["name"], ref)
                assert "secretRef" not in source
            for env in container.get("env", []):
                if env["name"].startswith("LORAPLEX_") and "value" in env:
                    assert env["name"] in AGENT_SETTINGS, env["name"]


@needs_kubectl
@pytest.mark.parametrize("name", support.OVERLAYS)
def test_api_runs_one_process_per_pod_with_split_probes(name: str) -> None:
    api = support.find(support.render_overlay(name), "Deployment", "loraplex-api")
    assert api is not None
    (container,) = support.pod_spec(api)["containers"]
    assert support.option_value(support.k8s_argv(container), "--workers") == "1"
    # SIGTERM lets the streams it holds finish.
    grace = support.pod_spec(api)["terminationGracePeriodSeconds"]
    assert grace >= stream_limit_s() + SHUTDOWN_MARGIN_S
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["FORWARDED_ALLOW_IPS"]["valueFrom"]["configMapKeyRef"]["name"].startswith(
        "loraplex-proxy"
    )


def test_compose_api_runs_one_process() -> None:
    api = support.compose_model()["services"]["api"]
    assert support.option_value(support.compose_argv(api), "--workers") == "1"
    assert int(api["stop_grace_period"].removesuffix("s")) >= stream_limit_s()
    assert api["environment"]["FORWARDED_ALLOW_IPS"]


@needs_kubectl
@pytest.mark.parametrize("name", support.OVERLAYS)
def test_agents_register_with_their_own_node_credential(name: str) -> None:
    for engine in engines(support.render_overlay(name)):
        spec = support.pod_spec(engine)
        (agent,) = [c for c in spec["initContainers"] if c["name"] == "agent"]
        script = agent["command"][2]
        assert "/etc/loraplex/node-credentials/$POD_NAME" in script
        assert support.option_value(support.k8s_argv(agent), "--name") == "$(POD_NAME)"
        mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        volume = volumes[mounts["/etc/loraplex/node-credentials"]]
        assert volume["secret"]["secretName"] == "loraplex-node-credentials"
        env = {e["name"]: e.get("valueFrom", {}) for e in agent["env"]}
        assert env["LORAPLEX_ENGINE_API_KEY"]["secretKeyRef"]["key"] == "LORAPLEX_ENGINE_API_KEY"


def test_compose_wires_redis_password_and_node_credentials() -> None:
    services = support.compose_model()["services"]
    env = support.read_env_file(support.ENV_EXAMPLE)
    password = env["REDIS_PASSWORD"]
    redis_args = services["redis"]["command"]
    assert redis_args[redis_args.index("--requirepass") + 1] == password
    assert f":{password}@redis:" in services["api"]["environment"]["LORAPLEX_REDIS_URL"]
    minted = services["node-credentials"]["command"][0]
    for name, service in services.items():
        if name.startswith("agent-"):
            node = service["environment"]["NODE_NAME"]
            assert support.option_value(support.compose_argv(service), "--name") == node
            assert node in minted, f"{node} gets no credential"
            assert "node-credentials:/etc/loraplex/node-credentials:ro" in service["volumes"]
            assert (
                service["environment"]["LORAPLEX_ENGINE_API_KEY"] == env["LORAPLEX_ENGINE_API_KEY"]
            )


def test_compose_migrate_waits_for_the_database() -> None:
    migrate = support.compose_argv(support.compose_model()["services"]["migrate"])
    script = migrate[2]
    assert script.index("wait_for_schema.py --reachable") < script.index("loraplex db upgrade")


@needs_kubectl
def test_node_model_cache_keeps_models_on_the_node_and_says_so() -> None:
    objects = support.render_with_components("prod", ("node-model-cache",))
    (namespace,) = [o for o in objects if o["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    readers = 0
    for workload in support.workloads(objects):
        spec = support.pod_spec(workload)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        if "models" not in volumes:
            continue
        readers += 1
        assert volumes["models"]["hostPath"]["path"] == "/var/lib/loraplex/models"
        names = [c["name"] for c in spec["initContainers"]]
        assert names.index("models-owner") < names.index("base-model")
    assert readers == 4  # two engine classes and two workers
    default = support.render_overlay("prod")
    (namespace,) = [o for o in default if o["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
