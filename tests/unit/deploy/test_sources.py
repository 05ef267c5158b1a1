"""Everything a rendered object needs has a source: the render itself, or a one-time step
docs/deploy.md lists (its table of Secrets an operator creates, and the base models pushed
to the bucket). So `kubectl apply -k` after those steps brings every pod up with nothing
waiting on a hand-filled volume, a missing ConfigMap key or a Secret nobody was told about.

Walked for every overlay, with and without the optional components: ServiceAccounts,
ConfigMaps (whole and single keys), Secrets (whole and single keys, against the documented
list), PVCs, volumes and their mounts, images, and the base model of every pod that mounts
/models.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.deploy import support

pytestmark = pytest.mark.skipif(not support.kubectl_available(), reason=support.KUBECTL_MISSING)

RENDERS = {
    "dev": ("dev", ()),
    "prod": ("prod", ()),
    "prod+servicemonitor+keda": ("prod", ("servicemonitor", "keda")),
    "prod+node-model-cache": ("prod", ("node-model-cache",)),
    "dev+node-model-cache": ("dev", ("node-model-cache",)),
}
ROW = re.compile(r"^\| `(loraplex-[a-z-]+)` \| `([^`]+)` \|")
ANY_KEY = "<engine pod name>"  # loraplex-node-credentials: one key per engine pod
# Images that are not built from this repository: where docs/deploy.md says they come from.
PUBLIC_IMAGES = {"postgres", "redis", "minio", "mc", "sglang", "vllm-cpu"}


def render(name: str) -> tuple[dict[str, Any], ...]:
    overlay, components = RENDERS[name]
    if not components:
        return support.render_overlay(overlay)
    return support.render_with_components(overlay, components)


def documented_secrets(overlay: str) -> dict[str, set[str]]:
    """Secret name -> keys an operator creates once: docs/deploy.md's table (prod), or what
    create-secrets.sh creates (dev) plus the node credentials."""
    secrets: dict[str, set[str]] = {}
    for line in support.DEPLOY_DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            secrets.setdefault(match[1], set()).add(match[2])
    if overlay == "dev":
        script = (support.K8S / "overlays" / "dev" / "create-secrets.sh").read_text()
        dev: dict[str, set[str]] = {}
        for block in script.split("create secret generic ")[1:]:
            name = block.split()[0]
            dev[name] = set(re.findall(r"--from-literal=([A-Z0-9_]+)=", block))
        dev["loraplex-node-credentials"] = secrets["loraplex-node-credentials"]
        return dev
    return secrets


def test_the_documented_secret_table_is_found() -> None:
    secrets = documented_secrets("prod")
    assert "LORAPLEX_DATABASE_URL" in secrets["loraplex-secrets"]
    assert secrets["loraplex-node-credentials"] == {ANY_KEY}
    dev = documented_secrets("dev")
    assert (
        "LORAPLEX_REDIS_URL" in dev["loraplex-secrets"]
        and "REDIS_PASSWORD" in dev["loraplex-dev-services"]
    )


def _names(objects: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


class Sources:
    """What one render provides, and what its one-time steps add."""

    def __init__(self, name: str) -> None:
        self.name = name
        objects = render(name)
        self.objects = objects
        self.config_maps = _names(objects, "ConfigMap")
        self.secrets = documented_secrets(RENDERS[name][0])
        for secret_name, secret in _names(objects, "Secret").items():
            self.secrets[secret_name] = set(secret.get("data", {})) | set(
                secret.get("stringData", {})
            )
        self.claims = set(_names(objects, "PersistentVolumeClaim"))
        self.accounts = set(_names(objects, "ServiceAccount"))

    def config_map(self, where: str, name: str, key: str | None = None) -> None:
        assert name in self.config_maps, f"{self.name} {where}: no ConfigMap {name}"
        if key is not None:
            assert key in self.config_maps[name].get("data", {}), f"{where}: {name} has no {key}"

    def secret(self, where: str, name: str, key: str | None = None) -> None:
        assert name in self.secrets, f"{self.name} {where}: Secret {name} has no source"
        if key is not None:
            keys = self.secrets[name]
            assert key in keys or ANY_KEY in keys, f"{self.name} {where}: {name} has no {key}"


def _check_env(sources: Sources, where: str, container: dict[str, Any]) -> None:
    for entry in container.get("envFrom", []):
        if "configMapRef" in entry:
            sources.config_map(where, entry["configMapRef"]["name"])
        if "secretRef" in entry:
            sources.secret(where, entry["secretRef"]["name"])
    for entry in container.get("env", []):
        ref = entry.get("valueFrom", {})
        if "configMapKeyRef" in ref:
            sources.config_map(where, ref["configMapKeyRef"]["name"], ref["configMapKeyRef"]["key"])
        if "secretKeyRef" in ref:
            sources.secret(where, ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"])


def _check_volumes(sources: Sources, where: str, workload: dict[str, Any]) -> None:
    spec = support.pod_spec(workload)
    templates = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for name, volume in volumes.items():
        if "configMap" in volume:
            sources.config_map(where, volume["configMap"]["name"])
        elif "secret" in volume:
            sources.secret(where, volume["secret"]["secretName"])
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            assert claim in sources.claims, f"{sources.name} {where}: no PVC {claim}"
        elif "hostPath" in volume:
            assert "node-model-cache" in sources.name, f"{where}: hostPath {name}"
        else:
            assert "emptyDir" in volume, f"{sources.name} {where}: volume {name} has no source"
    for container in support.containers(workload):
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes or mount["name"] in templates, (
                f"{sources.name} {where}/{container['name']}: mounts {mount['name']}"
            )


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_every_reference_has_a_source(name: str) -> None:
    sources = Sources(name)
    for workload in support.workloads(sources.objects):
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        spec = support.pod_spec(workload)
        account = spec.get("serviceAccountName")
        if account:
            assert account in sources.accounts, f"{name} {where}: no ServiceAccount {account}"
        for container in support.containers(workload):
            _check_env(sources, f"{where}/{container['name']}", container)
        _check_volumes(sources, where, workload)


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_every_image_has_a_documented_source(name: str) -> None:
    doc = support.DEPLOY_DOC.read_text()
    for workload in support.workloads(render(name)):
        for container in support.containers(workload):
            image = support.image_name(container["image"])
            if image in support.LORAPLEX_IMAGES:
                assert f"-t {image}:" in doc, f"{name}: no build command for {image}"
            else:
                assert image in PUBLIC_IMAGES, f"{name}: {container['image']} has no source"


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_no_pod_waits_on_a_hand_filled_model_volume(name: str) -> None:
    """Whoever mounts /models pulls its model into it first (the pull skips a complete copy),
    from a bucket the dev-model Job or the documented push fills."""
    objects = render(name)
    pushed_in_render = any(
        "base-models push" in " ".join(support.k8s_argv(c))
        for w in support.workloads(objects)
        for c in support.containers(w)
    )
    assert pushed_in_render or "loraplex base-models push" in support.DEPLOY_DOC.read_text()
    for workload in support.workloads(objects):
        spec = support.pod_spec(workload)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        readers = [
            (c, m)
            for c in support.containers(workload)
            for m in c.get("volumeMounts", [])
            if m["mountPath"] == "/models"
        ]
        if not readers or workload["metadata"]["name"] == "loraplex-dev-model":
            continue
        where = f"{name}: {workload['metadata']['name']}"
        assert "persistentVolumeClaim" not in volumes[readers[0][1]["name"]], where
        pulls = [c for c in spec.get("initContainers", []) if c["name"] == "base-model"]
        assert pulls, f"{where} mounts /models without pulling its model"
        args = support.k8s_argv(pulls[0])
        assert args[:3] == ["loraplex", "base-models", "pull"], where
        model = args[3]
        assert args[4] == f"/models/{model}", where
        for container in spec["containers"]:
            argv = support.k8s_argv(container)
            served = support.option_value(argv, "--served-model-name")
            assert served in (None, model), f"{where}: serves {served}, pulls {model}"
