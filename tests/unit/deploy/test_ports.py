"""The ports agree everywhere: API 8000, agents 8200, engines 30000.

What each process listens on (`--port` on its command line) is what its container declares,
what its probes and health checks ask, what Services expose, what the agents are told to
reach and advertise, and what the NetworkPolicies open.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.unit.deploy import support

RENDERS = ["dev", "prod", "prod+servicemonitor+keda", "prod+node-model-cache"]


def role(argv: list[str]) -> str | None:
    if "sglang.launch_server" in argv or "vllm.entrypoints.openai.api_server" in argv:
        return "engine"
    args = support.loraplex_invocations(argv)
    if args and args[0] in {"api", "agent"}:
        return args[0]
    return None


EXPECTED = {"api": support.API_PORT, "agent": support.AGENT_PORT, "engine": support.ENGINE_PORT}


def port_of(argv: list[str]) -> int:
    value = support.option_value(argv, "--port")
    assert value is not None, f"no --port in {argv}"
    return int(value)


def url_port(url: str) -> int:
    parts = urlsplit(url)
    assert parts.port is not None, f"{url} names no port"
    return parts.port


@pytest.mark.parametrize("name", RENDERS)
def test_kubernetes_ports(name: str) -> None:
    objects = support.all_renders()[name]
    api_pods: list[dict[str, str]] = []
    for workload in support.workloads(objects):
        pod_ports: dict[str, int] = {}
        roles: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for container in support.containers(workload):
            argv = support.k8s_argv(container)
            pod_ports.update(support.container_ports(container))
            r = role(argv)
            if r is None:
                continue
            roles[r] = (container, argv)
            where = f"{name}: {workload['metadata']['name']}/{container['name']}"
            listen = port_of(argv)
            assert listen == EXPECTED[r], f"{where} listens on {listen}"
            assert listen in support.container_ports(container).values(), f"{where}: undeclared"
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in container:
                    assert support.probe_port(container, container[probe]) == listen, where
        if "api" in roles:
            api_pods.append(support.pod_labels(workload))
        if "agent" in roles:
            _, agent = roles["agent"]
            _, engine = roles["engine"]
            engine_url = urlsplit(support.option_value(agent, "--engine-url"))
            assert engine_url.hostname == "127.0.0.1" and engine_url.port == port_of(engine)
            assert url_port(support.option_value(agent, "--advertise-url")) == port_of(agent)
            assert url_port(support.option_value(agent, "--engine-advertise-url")) == port_of(
                engine
            )
            register = urlsplit(support.option_value(agent, "--register-with"))
            service = support.find(objects, "Service", register.hostname)
            assert service is not None, f"{name}: no Service {register.hostname}"
            (port,) = [p for p in service["spec"]["ports"] if p["port"] == register.port]
            assert port["port"] == support.API_PORT
            assert service["spec"]["selector"]["app.kubernetes.io/component"] == "api"
    assert api_pods
    service = support.find(objects, "Service", "loraplex-api")
    assert [p["port"] for p in service["spec"]["ports"]] == [support.API_PORT]
    # Only API pods reach engines and agents, on exactly their two ports.
    policy = support.find(objects, "NetworkPolicy", "loraplex-engine-ingress")
    (rule,) = policy["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} == {support.AGENT_PORT, support.ENGINE_PORT}
    (source,) = rule["from"]
    assert all(support.selector_matches(source["podSelector"]["matchLabels"], p) for p in api_pods)
    api_policy = support.find(objects, "NetworkPolicy", "loraplex-api-ingress")
    assert [p["port"] for r in api_policy["spec"]["ingress"] for p in r["ports"]] == [
        support.API_PORT
    ]
    for svc in (
        o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["name"].startswith("loraplex-engine")
    ):
        assert {p["port"] for p in svc["spec"]["ports"]} == {
            support.AGENT_PORT,
            support.ENGINE_PORT,
        }


def test_compose_ports() -> None:
    services = support.compose_model()["services"]
    for name, service in services.items():
        argv = support.compose_argv(service)
        r = role(argv)
        if r is None:
            continue
        listen = port_of(argv)
        assert listen == EXPECTED[r], f"{name} listens on {listen}"
        test = " ".join(service.get("healthcheck", {}).get("test", []))
        assert f"127.0.0.1:{listen}/" in test, f"{name}'s healthcheck asks another port"
        if r == "api":
            assert any(str(p).endswith(f":{listen}") for p in service["ports"]), name
        if r == "agent":
            # The agent and its engine share one node's network namespace (node-r16, ...).
            engine_name = support.compose_engine_of(name)
            node = service["network_mode"].removeprefix("service:")
            assert services[engine_name]["network_mode"] == service["network_mode"], name
            engine = support.compose_argv(services[engine_name])
            engine_url = urlsplit(support.option_value(argv, "--engine-url"))
            assert engine_url.hostname == "127.0.0.1" and engine_url.port == port_of(engine)
            advertise = urlsplit(support.option_value(argv, "--advertise-url"))
            assert (advertise.hostname, advertise.port) == (node, listen)
            engine_advertise = urlsplit(support.option_value(argv, "--engine-advertise-url"))
            assert (engine_advertise.hostname, engine_advertise.port) == (node, port_of(engine))
            register = urlsplit(support.option_value(argv, "--register-with"))
            assert register.hostname in services
            assert port_of(support.compose_argv(services[register.hostname])) == register.port
