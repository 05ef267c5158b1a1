"""The Kustomize overlays render, and every object is valid Kubernetes 1.32.

Rendering: `kubectl kustomize` (kustomize v5.5 in Debian's kubectl 1.32). Skipped, with the
reason, only when kubectl is not installed.

Built-in kinds are validated with `kubernetes-validate` against the Kubernetes 1.32 OpenAPI
schemas it bundles, in strict mode (an unknown field fails, as `kubectl apply
--validate=strict` would). Custom resources are validated against models generated from
their CRDs: KEDA's ScaledObject (cloudcoil-models-keda 2.16.1) and the Prometheus
Operator's ServiceMonitor (cloudcoil-models-prometheus-operator 0.80.1); those models ignore
unknown fields, so the object must also survive a round trip through the model unchanged.

Then the wiring the API server cannot check: names that must resolve inside the render
(ConfigMaps, PVCs, volumes, Services' selectors and ports, HPA/PDB/ScaledObject targets),
the native sidecar, probes, and the settings that every Loraplex pod needs.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.deploy import support

KUBERNETES_VERSION = "1.32.0"
RENDERS = ["dev", "prod", "prod+servicemonitor+keda", "prod+node-model-cache"]
SECRET_NAMES = {"loraplex-secrets", "loraplex-dev-services"}  # created outside the repo


def render(name: str) -> tuple[dict[str, Any], ...]:
    return support.all_renders()[name]


def _crd_model(obj: dict[str, Any]) -> Any:
    if obj["apiVersion"] == "keda.sh/v1alpha1" and obj["kind"] == "ScaledObject":
        from cloudcoil.models.keda.v1alpha1 import ScaledObject

        return ScaledObject
    if obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "ServiceMonitor":
        from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor

        return ServiceMonitor
    return None


@pytest.mark.parametrize("name", RENDERS)
def test_objects_validate_against_kubernetes_schemas(name: str) -> None:
    import kubernetes_validate

    bundled = kubernetes_validate.utils.all_versions()
    assert KUBERNETES_VERSION in bundled, f"kubernetes-validate bundles {bundled}"
    errors = []
    for obj in render(name):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        model = _crd_model(obj)
        if model is not None:
            try:
                parsed = model.model_validate(obj)
            except Exception as exc:
                errors.append(f"{where}: {exc}")
                continue
            dumped = parsed.model_dump(by_alias=True, exclude_none=True, mode="json")
            if dumped != obj:
                errors.append(f"{where}: fields the CRD does not define, or of the wrong type")
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{where}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{where}: no schema ({exc.message})")
    assert not errors, "\n".join(errors)


def test_crd_round_trip_catches_unknown_fields() -> None:
    scaled = next(o for o in render("prod+servicemonitor+keda") if o["kind"] == "ScaledObject")
    model = _crd_model(scaled)
    bad = {**scaled, "spec": {**scaled["spec"], "maxReplicas": 4}}
    dumped = model.model_validate(bad).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped != bad


@pytest.mark.parametrize("name", RENDERS)
def test_references_resolve(name: str) -> None:
    objects = render(name)
    configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    pvcs = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    for workload in support.workloads(objects):
        where = f"{name}: {workload['kind']}/{workload['metadata']['name']}"
        spec = support.pod_spec(workload)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claim_templates = {
            t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])
        }
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in pvcs, where
        if "serviceAccountName" in spec:
            assert spec["serviceAccountName"] in accounts, where
        for container in support.containers(workload):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in claim_templates, (
                    f"{where}: mount {mount['name']}"
                )
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps, where
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in SECRET_NAMES, where
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] in SECRET_NAMES, where
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in container and "httpGet" in container[probe]:
                    port = container[probe]["httpGet"]["port"]
                    assert str(port) in support.container_ports(container), (
                        f"{where}: {container['name']} {probe} port {port} is not declared"
                    )
            # $(VAR) in command/args expands only from the container's own env.
            defined = {e["name"] for e in container.get("env", [])}
            for token in [*container.get("command", []), *container.get("args", [])]:
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", token):
                    assert var in defined, f"{where}: $({var}) is not in {container['name']}'s env"


@pytest.mark.parametrize("name", RENDERS)
def test_services_and_targets_select_something(name: str) -> None:
    objects = render(name)
    pods = [
        (support.pod_labels(w), support.containers(w))
        for w in support.workloads(objects)
        if w["kind"] != "Job"
    ]
    for service in (o for o in objects if o["kind"] == "Service"):
        selected = [
            c
            for labels, cs in pods
            if support.selector_matches(service["spec"]["selector"], labels)
            for c in cs
        ]
        assert selected, f"{name}: Service {service['metadata']['name']} selects no pod"
        for port in service["spec"]["ports"]:
            target = str(port.get("targetPort", port["port"]))
            assert any(target in support.container_ports(c) for c in selected), (
                f"{name}: Service {service['metadata']['name']} targetPort {target}"
            )
    for obj in objects:
        kind = obj["kind"]
        if kind in {"HorizontalPodAutoscaler", "ScaledObject"}:
            ref = obj["spec"]["scaleTargetRef"]
            target = support.find(objects, ref.get("kind", "Deployment"), ref["name"])
            assert target is not None, f"{name}: {kind}/{obj['metadata']['name']} target"
        if kind == "PodDisruptionBudget" or kind == "NetworkPolicy":
            selector = obj["spec"].get("selector") or obj["spec"].get("podSelector")
            labels = selector.get("matchLabels", {})
            if labels:
                assert any(support.selector_matches(labels, p) for p, _ in pods), (
                    f"{name}: {kind}/{obj['metadata']['name']} selects no pod"
                )
        if kind == "ServiceMonitor":
            labels = obj["spec"]["selector"]["matchLabels"]
            services = [
                s
                for s in objects
                if s["kind"] == "Service"
                and support.selector_matches(labels, s["metadata"].get("labels", {}))
            ]
            assert services, f"{name}: ServiceMonitor {obj['metadata']['name']} selects no Service"
            port_names = {p.get("name") for s in services for p in s["spec"]["ports"]}
            for endpoint in obj["spec"]["endpoints"]:
                assert endpoint["port"] in port_names


@pytest.mark.parametrize("name", support.OVERLAYS)
def test_platform_processes(name: str) -> None:
    objects = render(name)
    beat = support.find(objects, "Deployment", "loraplex-beat")
    assert beat is not None
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    api = support.find(objects, "Deployment", "loraplex-api")
    assert api is not None
    assert support.find(objects, "HorizontalPodAutoscaler", "loraplex-api") is not None
    assert support.find(objects, "PodDisruptionBudget", "loraplex-api") is not None
    job = support.find(objects, "Job", "loraplex-migrate")
    assert job is not None
    (migrate,) = support.pod_spec(job)["containers"]
    assert support.k8s_argv(migrate) == ["loraplex", "db", "upgrade"]
    (wait,) = support.pod_spec(job)["initContainers"]  # for the database to answer
    assert support.k8s_argv(wait)[1:3] == ["/opt/loraplex/wait_for_schema.py", "--reachable"]
    # Everything that needs the schema waits for the Job's effect; the API never migrates.
    for workload in support.workloads(objects):
        loraplex_pod = support.pod_labels(workload).get("app.kubernetes.io/name") == "loraplex"
        if workload["kind"] != "Deployment" or not loraplex_pod:
            continue
        inits = support.pod_spec(workload).get("initContainers", [])
        waits = [c for c in inits if c["name"] == "wait-for-schema"]
        assert waits, f"{workload['metadata']['name']} does not wait for the migrations"
        assert waits[0]["command"][:2] == ["python", "/opt/loraplex/wait_for_schema.py"]
    api_args = support.k8s_argv(support.pod_spec(api)["containers"][0])
    assert "--migrate" not in api_args


@pytest.mark.parametrize("name", support.OVERLAYS)
def test_engine_pods(name: str) -> None:
    objects = render(name)
    config = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("loraplex-config")
    )
    cache_dir = config["data"]["LORAPLEX_DATA_DIR"] + "/cache"
    engines = [
        w
        for w in support.workloads(objects)
        if support.pod_labels(w).get("app.kubernetes.io/component") == "engine"
    ]
    expected = {
        "dev": {"loraplex-engine-cpu"},
        "prod": {"loraplex-engine-r16", "loraplex-engine-r64"},
    }
    assert {e["metadata"]["name"] for e in engines} == expected[name]
    for engine in engines:
        where = f"{name}: {engine['metadata']['name']}"
        spec = support.pod_spec(engine)
        (agent,) = [c for c in spec["initContainers"] if c["name"] == "agent"]
        assert agent.get("restartPolicy") == "Always", f"{where}: agent is not a native sidecar"
        (server,) = spec["containers"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        agent_mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
        server_mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
        assert agent_mounts[cache_dir]["name"] == server_mounts[cache_dir]["name"], where
        assert server_mounts[cache_dir].get("readOnly") is True, where
        assert "emptyDir" in volumes[agent_mounts[cache_dir]["name"]], where
        assert volumes[server_mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory", where
        # The agent's cache budget fits its volume.
        budget = int(
            next(e["value"] for e in agent["env"] if e["name"] == "LORAPLEX_DISK_CACHE_BYTES")
        )
        limit = volumes[agent_mounts[cache_dir]["name"]]["emptyDir"]["sizeLimit"]
        assert budget < quantity_bytes(limit), f"{where}: cache budget over the volume's sizeLimit"
        # Probes: the engine's /health (with a long startup), readiness on the agent.
        assert server["livenessProbe"]["httpGet"]["path"] == "/health", where
        startup = server["startupProbe"]
        assert startup["httpGet"]["path"] == "/health", where
        assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz", where
        assert agent["livenessProbe"]["httpGet"]["path"] == "/healthz", where
        drain = " ".join(server["lifecycle"]["preStop"]["exec"]["command"])
        assert "http://127.0.0.1:8200/drain" in drain and "method='POST'" in drain, where
        if name == "prod":
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 1200, where
            assert server["resources"]["limits"]["nvidia.com/gpu"] == 1, where
            assert spec["nodeSelector"] and spec["tolerations"], where
            assert support.image_tag(server["image"]) == "v" + sglang_version()
        service = support.find(objects, "Service", engine["spec"]["serviceName"])
        assert service is not None, where


def sglang_version() -> str:
    from loraplex.serving.engines.launch_sglang import SGLANG_VERSION

    return SGLANG_VERSION


def quantity_bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


@pytest.mark.parametrize("name", RENDERS)
def test_images_are_pinned(name: str) -> None:
    for workload in support.workloads(render(name)):
        for container in support.containers(workload):
            image = container["image"]
            tag = support.image_tag(image)
            assert tag, f"{name}: {image} has no tag"
            if tag == "latest":
                # Only the vLLM CPU image you build and tag yourself (docs/deploy.md).
                assert support.image_name(image) == "vllm-cpu", f"{name}: {image}"
                assert container.get("imagePullPolicy") == "IfNotPresent"


def test_optional_components_add_what_they_say() -> None:
    objects = render("prod+servicemonitor+keda")
    kinds = [o["kind"] for o in objects]
    assert kinds.count("ScaledObject") == 2 and kinds.count("ServiceMonitor") == 2
    for sts in (o for o in objects if o["kind"] == "StatefulSet"):
        assert "replicas" not in sts["spec"], "KEDA owns the engines' replicas"
    for scaled in (o for o in objects if o["kind"] == "ScaledObject"):
        # the demand the API's gate sees for the target's rank class (docs/observability.md)
        rank_class = scaled["metadata"]["labels"]["loraplex.io/rank-class"]
        assert scaled["spec"]["scaleTargetRef"]["name"] == f"loraplex-engine-r{rank_class}"
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["type"] == "prometheus"
            assert f'rank_class="{rank_class}"' in trigger["metadata"]["query"]
