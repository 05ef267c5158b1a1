"""A real Prometheus on the data host, run from the shipped configuration.

deploy/observability/prometheus.yml and rules.yaml are copied unchanged into a folder of
their own; the harness writes only what the file asks an operator for: the scrape token and
the target files with its hosts' addresses. Prometheus (Debian's binary) keeps its storage
in that folder and is stopped, by its process, when the test is done.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from tests.support.netns import Process
from tests.system.cluster import AGENT_PORT, API_PORT, ENGINE_PORT, METRICS_TOKEN, REPO, Cluster

SHIPPED = REPO / "deploy" / "observability"
PROMETHEUS_PORT = 9090
Sample = dict[str, Any]  # {"metric": {labels}, "value": [time, "value"]}


class HarnessPrometheus:
    """Prometheus scraping the cluster's API and engine hosts, and its HTTP API."""

    def __init__(self, cluster: Cluster, engine_hosts: tuple[str, ...]) -> None:
        self.cluster = cluster
        self.folder = cluster.workdir / "prometheus"
        self.engine_hosts = engine_hosts
        self.process: Process | None = None

    @property
    def url(self) -> str:
        """Its HTTP API's base URL, on the data host."""
        return f"http://{self.cluster.data_ip}:{PROMETHEUS_PORT}"

    def start(self, api_hosts: tuple[str, ...]) -> None:
        """Write the shipped config's folder, start Prometheus, wait until it is ready."""
        prometheus = shutil.which("prometheus")
        assert prometheus is not None, "Debian's prometheus: make prometheus"
        (self.folder / "targets").mkdir(parents=True)
        for name in ("prometheus.yml", "rules.yaml"):
            shutil.copy(SHIPPED / name, self.folder / name)
        token = self.folder / "metrics-token"
        token.write_text(METRICS_TOKEN)
        token.chmod(0o600)
        self._targets("api", [f"{self._ip(h)}:{API_PORT}" for h in api_hosts])
        self._targets("engines", [f"{self._ip(h)}:{ENGINE_PORT}" for h in self.engine_hosts])
        self._targets("agents", [f"{self._ip(h)}:{AGENT_PORT}" for h in self.engine_hosts])
        self.process = self.cluster.network.start(
            "data",
            "prometheus",
            [
                prometheus,
                f"--config.file={self.folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.folder / 'data'}",
                f"--web.listen-address={self.cluster.data_ip}:{PROMETHEUS_PORT}",
            ],
        )
        assert self.cluster.client is not None
        ready = f"{self.url}/-/ready"
        self.cluster._wait_for(
            lambda: self.cluster.client.request("GET", ready, timeout=1.0).get("status") == 200,  # type: ignore[union-attr]
            self.process,
        )

    def stop(self) -> None:
        """Stop Prometheus (SIGTERM, then SIGKILL) and delete its folder."""
        if self.process is not None:
            self.process.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def query(self, expr: str) -> list[Sample]:
        """An instant query's samples (an error fails the test with Prometheus's words)."""
        assert self.cluster.client is not None
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        reply = self.cluster.client.request("GET", url, timeout=10.0)
        assert reply.get("status") == 200, reply
        body = json.loads(reply["text"])
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def wait_for(
        self, expr: str, timeout_s: float, holds: Callable[[list[Sample]], bool] = bool
    ) -> list[Sample]:
        """Poll `expr` until `holds(samples)`; the last samples either way."""
        deadline = time.monotonic() + timeout_s
        samples = self.query(expr)
        while not holds(samples) and time.monotonic() < deadline:
            time.sleep(1.0)
            samples = self.query(expr)
        return samples

    def _ip(self, host: str) -> str:
        return self.cluster.network.hosts[host].ip

    def _targets(self, name: str, addresses: list[str]) -> None:
        path = self.folder / "targets" / f"{name}.json"
        path.write_text(json.dumps([{"targets": addresses}]))
