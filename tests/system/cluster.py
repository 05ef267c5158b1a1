"""Loraplex as deployed, on namespaces: a data host, two API hosts and a client host.

`data` runs its own PostgreSQL (initdb into a temp dir, run as the `postgres` user), Redis
and the S3 server; `api1` and `api2` each run `loraplex api` against them; `engine1` and
`engine2` each run an engine (the stand-in, fake_engine.py) and `loraplex agent`, which
registers the engine with an API host, heartbeats, and loads adapters from the object store
into its own disk cache; `client` sends the traffic through `ClientHost`, a long-lived HTTP
agent inside its namespace. Every service can be stopped, killed and started again by the
drills. As shipped, no process holds the shared `LORAPLEX_AGENT_TOKEN`: each agent accepts
only the secret it made at start and registered, which the API hosts send it.
"""

from __future__ import annotations

import itertools
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loraplex.serving.engines.launcher import EngineConfig, server_command, server_env
from loraplex.serving.engines.priority import lower_busy_waiters
from loraplex.settings import Settings
from tests.support.netns import Network, Process
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY

REPO = Path(__file__).resolve().parents[2]
API_PORT, PG_PORT, REDIS_PORT, S3_PORT = 8000, 5432, 6379, 9000
API_HOSTS = ("api1", "api2")
ENGINE_HOSTS = ("engine1", "engine2")
FAKE_MODEL = "loraplex-fake"  # the base model the stand-in engines serve
ENGINE_PORT, AGENT_PORT = 8000, 8200
METRICS_TOKEN = secrets.token_urlsafe(24)  # Prometheus sends it to scrape the API (prometheus.py)
# Two more engine hosts run the real thing: vLLM's CPU build on the development model, each
# with its agent. Started only for the drill that needs them (a minute of CPU on 2 cores).
REAL_ENGINE_HOSTS = ("vllm1", "vllm2")
REAL_MODEL_DIR = REPO / "var" / "models" / "loraplex-tiny"
REAL_MODEL = REAL_MODEL_DIR.name  # the model id vLLM serves (the folder's name)
# Each engine host's agent registers with "its" API host (in production: the API's Service).
REGISTERS_WITH = {"engine1": "api1", "engine2": "api2", "vllm1": "api1", "vllm2": "api2"}
# A small node cache, so a soak over many adapters makes the agents evict.
AGENT_CACHE_BYTES = 2 * 2**20  # about three and a half of the tests' adapters

CONSOLE_SECRET = secrets.token_urlsafe(32)  # the same on every API host


class ClientHost:
    """The client namespace's HTTP agent (client_worker.py); requests may overlap."""

    def __init__(self, network: Network) -> None:
        self._popen = network.popen(
            "client",
            [sys.executable, str(Path(__file__).with_name("client_worker.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(REPO),
        )
        self._lock = threading.Lock()
        self._replies: dict[int, Future[dict[str, Any]]] = {}
        self._ids = itertools.count()
        threading.Thread(target=self._read_replies, daemon=True).start()

    def _read_replies(self) -> None:
        assert self._popen.stdout is not None
        for line in self._popen.stdout:
            reply = json.loads(line)
            with self._lock:
                future = self._replies.pop(reply.pop("id"))
            future.set_result(reply)
        with self._lock:  # the agent exited: nobody will answer what is pending
            for future in self._replies.values():
                future.set_exception(RuntimeError("the client agent exited"))

    def submit(self, command: dict[str, Any]) -> Future[dict[str, Any]]:
        """Send one command; its reply arrives on the future."""
        assert self._popen.stdin is not None
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            command_id = next(self._ids)
            self._replies[command_id] = future
            self._popen.stdin.write(json.dumps({"id": command_id, **command}) + "\n")
            self._popen.stdin.flush()
        return future

    def request(self, method: str, url: str, **kw: Any) -> dict[str, Any]:
        """A plain request from the client host: status, headers, text (or error)."""
        return self.submit({"op": "request", "method": method, "url": url, **kw}).result(120)

    def stream(self, url: str, **kw: Any) -> Future[dict[str, Any]]:
        """Start an SSE POST; the future holds its status, `data:` payloads and timings."""
        return self.submit({"op": "stream", "method": "POST", "url": url, **kw})


@dataclass
class Cluster:
    """The running topology, with handles to restart each service."""

    network: Network
    workdir: Path
    client: ClientHost | None = None
    services: dict[str, Process] = field(default_factory=dict)
    api_modes: dict[str, str] = field(default_factory=dict)  # host -> ratelimit fail mode
    operator_key: str = ""
    bucket: str = field(default_factory=lambda: f"adapters-{secrets.token_hex(4)}")

    @property
    def data_ip(self) -> str:
        """The data host's address."""
        return self.network.hosts["data"].ip

    def api_url(self, host: str) -> str:
        """The base URL of the API on `host`."""
        return f"http://{self.network.hosts[host].ip}:{API_PORT}"

    # --- PostgreSQL -------------------------------------------------------------------

    def init_postgres(self) -> None:
        """initdb a cluster owned by `postgres`, trusting the private subnet."""
        pgdata = self.workdir / "pgdata"
        pgdata.mkdir()
        user = pwd.getpwnam("postgres")
        os.chown(self.workdir, user.pw_uid, user.pw_gid)
        os.chown(pgdata, user.pw_uid, user.pw_gid)
        subprocess.run(
            [
                "setpriv",
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--init-groups",
                "initdb",
                "-D",
                str(pgdata),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )
        with (pgdata / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.network.subnet}.0/24 trust\n")

    def start_postgres(self) -> None:
        """Start the postmaster as `postgres` (SIGINT stops it: a fast shutdown)."""
        pgdata = self.workdir / "pgdata"
        user = pwd.getpwnam("postgres")
        self.services["postgres"] = self.network.start(
            "data",
            "postgres",
            [
                "setpriv",
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--init-groups",
                "postgres",
                "-D",
                str(pgdata),
                "-p",
                str(PG_PORT),
                "-c",
                f"listen_addresses={self.data_ip}",
                "-c",
                f"unix_socket_directories={pgdata}",
                "-c",
                "fsync=off",
            ],
            stop_signal=signal.SIGINT,
        )
        self._wait_for(
            lambda: self._in("data", ["pg_isready", "-q", "-h", self.data_ip, "-p", str(PG_PORT)]),
            self.services["postgres"],
        )

    def stop_postgres(self) -> None:
        """A fast shutdown (what `pg_ctl stop -m fast` sends)."""
        self.services["postgres"].stop(grace_s=30)

    # --- Redis and S3 -----------------------------------------------------------------

    def start_redis(self) -> None:
        """Redis on the data host, no persistence: a restart is an empty Redis."""
        self.services["redis"] = self.network.start(
            "data",
            "redis",
            [
                "redis-server",
                "--bind",
                self.data_ip,
                "--port",
                str(REDIS_PORT),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
        )
        ping = ["redis-cli", "-h", self.data_ip, "-p", str(REDIS_PORT), "ping"]
        self._wait_for(lambda: self._in("data", ping), self.services["redis"])

    def stop_redis(self) -> None:
        """Stop Redis (SIGTERM)."""
        self.services["redis"].stop()

    def start_s3(self) -> None:
        """The moto S3 server on the data host."""
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        self.services["s3"] = self.network.start(
            "data",
            "s3",
            [sys.executable, "-m", "moto.server", "-p", str(S3_PORT), "-H", self.data_ip],
            env=env,
        )
        curl = ["curl", "-sf", "-o", "/dev/null", f"http://{self.data_ip}:{S3_PORT}/moto-api/"]
        self._wait_for(lambda: self._in("data", curl), self.services["s3"])
        if self.operator_key:  # a restart: moto kept nothing, so the bucket is made again
            self._ensure_bucket()

    def _ensure_bucket(self) -> None:
        """Create the bucket as an API process does at start-up (`ObjectStore.check`)."""
        check = (
            "from loraplex.connections import open_object_store\n"
            "from loraplex.settings import Settings\n"
            "open_object_store(Settings.from_env()).check()\n"
        )
        namespace = self.network.hosts["api1"].namespace
        subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, "-c", check],
            env=self.env("api1"),
            cwd=REPO,
            check=True,
            capture_output=True,
            timeout=60,
        )

    # --- API hosts --------------------------------------------------------------------

    def settings(self, host: str) -> Settings:
        """The settings of the API on `host`: everything on the data host."""
        data = self.data_ip
        return Settings(
            database_url=f"postgresql+asyncpg://postgres@{data}:{PG_PORT}/loraplex",
            redis_url=f"redis://{data}:{REDIS_PORT}/0",
            data_dir=self.workdir / host,
            object_store="s3",
            s3_endpoint_url=f"http://{data}:{S3_PORT}",
            s3_bucket=self.bucket,
            s3_region=REGION,
            s3_access_key_id=ACCESS_KEY,
            s3_secret_access_key=SECRET_KEY,
            secret_key=CONSOLE_SECRET,  # outside local mode a placeholder refuses to start
            engine_admission=False,
            ratelimit_fail_mode=self.api_modes.get(host, "closed"),
            concurrency_lease_s=5.0,  # the API-host drill waits for a dead host's lease
            # A cut link shows no error, only silence: these bound how long a stream waits
            # for it (defaults 60 s and 30 s), short enough for the link drill, long enough
            # for a stream that is only slow on a loaded 2-core host.
            ttft_timeout_s=8.0,
            idle_timeout_s=4.0,
            metrics_token=METRICS_TOKEN,
            agent_heartbeat_s=1.0,
            agent_stale_after_s=6.0,
            # The drills' adapters are cold until asked: the S3 drill asks for one while the
            # store is down, the host drills follow where the first request placed one.
            warm_on_upload=False,
        )

    def env(self, host: str) -> dict[str, str]:
        """The environment of a Loraplex process on `host`."""
        return {**os.environ, **self.settings(host).to_env()}

    def loraplex(self, host: str, *args: str) -> str:
        """Run one `loraplex` command on `host`; its stdout."""
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.network.hosts[host].namespace,
                sys.executable,
                "-m",
                "loraplex.cli",
                *args,
            ],
            env=self.env(host),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"loraplex {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def prepare_database(self) -> None:
        """Create the database, migrate it and make the operator key."""
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.network.hosts["data"].namespace,
                "createdb",
                "-h",
                self.data_ip,
                "-p",
                str(PG_PORT),
                "-U",
                "postgres",
                "loraplex",
            ],
            check=True,
            capture_output=True,
        )
        self.loraplex("api1", "db", "upgrade")
        key = self.loraplex("api1", "admin", "create-operator", "--email", "ops@example.com")
        self.operator_key = key.strip().splitlines()[-1]

    def start_api(self, host: str) -> None:
        """Start `loraplex api` on `host` and wait until the client sees it healthy."""
        (self.workdir / host).mkdir(exist_ok=True)
        ip = self.network.hosts[host].ip
        self.services[host] = self.network.start(
            host,
            "api",
            [sys.executable, "-m", "loraplex.cli", "api", "--host", ip, "--port", str(API_PORT)],
            env=self.env(host),
            cwd=str(REPO),
        )
        assert self.client is not None
        health = f"{self.api_url(host)}/healthz"
        self._wait_for(
            lambda: self.client.request("GET", health, timeout=1.0).get("status") == 200,  # type: ignore[union-attr]
            self.services[host],
            timeout_s=90,
        )

    def restart_api(self, host: str) -> None:
        """Start `host`'s API again after a drill stopped or killed it."""
        if not self.services[host].is_running:
            self.start_api(host)

    # --- engine hosts: a stand-in engine (fake_engine.py) and `loraplex agent` ----------

    def engine_url(self, host: str) -> str:
        """The base URL of the engine on `host`."""
        return f"http://{self.network.hosts[host].ip}:{ENGINE_PORT}"

    def agent_cache(self, host: str) -> Path:
        """The agent's adapter cache directory on `host`."""
        return self.workdir / host / "cache"

    def start_engine_host(self, host: str) -> None:
        """Start `host`'s engine, then its agent, which registers it with its API host."""
        self.start_fake_engine(host)
        self.start_agent(host)

    def kill_engine_host(self, host: str) -> None:
        """The host dies: its engine and its agent, without a word to anyone."""
        self.services[host].kill()
        self.services[f"{host}-agent"].kill()

    def start_fake_engine(self, host: str) -> None:
        """Start the stand-in engine on `host` and wait until the client sees it."""
        ip = self.network.hosts[host].ip
        self.services[host] = self.network.start(
            host,
            "fake-engine",
            [
                sys.executable,
                str(Path(__file__).with_name("fake_engine.py")),
                "--host",
                ip,
                "--port",
                str(ENGINE_PORT),
                "--name",
                host,
                "--model",
                FAKE_MODEL,
            ],
        )
        assert self.client is not None
        health = f"{self.engine_url(host)}/health"
        self._wait_for(
            lambda: self.client.request("GET", health, timeout=1.0).get("status") == 200,  # type: ignore[union-attr]
            self.services[host],
        )

    def start_real_engine(self, host: str) -> None:
        """Start vLLM's CPU server on `host` (the suite's engine venv and model); return at
        once: `wait_for_real_engine` waits for it, so two can start side by side."""
        config = self.real_engine_config(host)
        # vLLM's `auto` binding puts every engine's worker on core 0: one restarting beside
        # another that serves got no CPU at all (seen on 2 cores). One core each.
        core = REAL_ENGINE_HOSTS.index(host) % (os.cpu_count() or 1)
        bind = {"VLLM_CPU_OMP_THREADS_BIND": str(core)}
        self.services[host] = self.network.start(
            host,
            "vllm",
            server_command(config),
            env={**server_env(config, os.environ), **bind},
            cwd=str(REPO),
            group=True,  # its engine-core worker dies with it, as with the host
        )

    def wait_for_real_engine(self, host: str, timeout_s: float = 240.0) -> None:
        """Wait until the client host sees `host`'s real engine healthy, then lower its
        spinning EngineCore's priority as the launcher does (engines/priority.py): at normal
        priority it starved the other engine host's restart of CPU (seen on 2 cores)."""
        assert self.client is not None
        health = f"{self.engine_url(host)}/health"
        self._wait_for(
            lambda: self.client.request("GET", health, timeout=1.0).get("status") == 200,  # type: ignore[union-attr]
            self.services[host],
            timeout_s=timeout_s,
        )
        lower_busy_waiters(self.services[host].pid, self.real_engine_config(host).scheduler_nice)

    def real_engine_config(self, host: str) -> EngineConfig:
        """The launcher's config of the real engine on `host`."""
        return EngineConfig(
            kind="vllm",
            model_dir=REAL_MODEL_DIR,
            host=self.network.hosts[host].ip,
            port=ENGINE_PORT,
            max_lora_rank=64,
            state_dir=self.workdir / host / "engine",
        )

    def start_agent(
        self, host: str, kind: str = "vllm", base_model: str = FAKE_MODEL, max_lora_rank: int = 64
    ) -> None:
        """Start `loraplex agent --register-with` on `host` and wait until it registered.

        It listens on every address of the host, loopback too: the pod's preStop hook calls
        `http://127.0.0.1:8200/drain` (agent_drain.py)."""
        ip = self.network.hosts[host].ip
        (self.workdir / host).mkdir(exist_ok=True)
        # Each agent registers with a credential of its own, good for its engine name only.
        credential = self.loraplex("api1", "nodes", "mint", host).strip().splitlines()[-1]
        self.services[f"{host}-agent"] = self.network.start(
            host,
            "agent",
            [
                sys.executable, "-m", "loraplex.cli", "agent",
                "--engine-url", self.engine_url(host), "--engine-kind", kind,
                "--host", "0.0.0.0", "--port", str(AGENT_PORT),
                "--advertise-url", f"http://{ip}:{AGENT_PORT}",
                "--cache-dir", str(self.agent_cache(host)),
                "--cache-bytes", str(AGENT_CACHE_BYTES),
                "--register-with", self.api_url(REGISTERS_WITH[host]),
                "--name", host, "--base-model", base_model,
                "--max-lora-rank", str(max_lora_rank), "--gpu-slots", "4", "--host-slots", "8",
            ],
            env={**self.env(host), "LORAPLEX_NODE_CREDENTIAL": credential},
            cwd=str(REPO),
        )  # fmt: skip
        assert self.client is not None
        ready = f"http://{ip}:{AGENT_PORT}/readyz"
        self._wait_for(
            lambda: self.client.request("GET", ready, timeout=1.0).get("status") == 200,  # type: ignore[union-attr]
            self.services[f"{host}-agent"],
        )

    def engine_stats(self, host: str) -> dict[str, int]:
        """What the stand-in engine on `host` holds: `held`, `streaming`, `served`."""
        assert self.client is not None
        reply = self.client.request("GET", f"{self.engine_url(host)}/stats", timeout=2.0)
        return dict(json.loads(reply["text"])) if reply.get("status") == 200 else {}

    # --- helpers ----------------------------------------------------------------------

    def _in(self, host: str, argv: list[str]) -> bool:
        """Whether `argv` succeeds inside `host`."""
        namespace = self.network.hosts[host].namespace
        done = subprocess.run(["ip", "netns", "exec", namespace, *argv], capture_output=True)
        return done.returncode == 0

    @staticmethod
    def _wait_for(ready: Any, process: Process, timeout_s: float = 60.0) -> None:
        """Poll `ready()` until true; fail with the process's log if it exits or stalls."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not process.is_running:
                raise RuntimeError(f"{process.name} exited:\n{process.log_tail()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{process.name} not ready in {timeout_s}s:\n{process.log_tail()}")


def build_cluster(api_modes: dict[str, str]) -> Cluster:
    """Make the namespaces and start every service; the caller must `close_cluster` it."""
    workdir = Path(tempfile.mkdtemp(prefix=f"lpx{os.getpid()}-system-"))
    network = Network(log_dir=workdir)
    cluster = Cluster(network, workdir, api_modes=api_modes)
    try:
        for host in ("data", *API_HOSTS, *ENGINE_HOSTS, *REAL_ENGINE_HOSTS, "client"):
            network.add_host(host)
        cluster.client = ClientHost(network)
        cluster.init_postgres()
        cluster.start_postgres()
        cluster.start_redis()
        cluster.start_s3()
        cluster.prepare_database()
        for host in API_HOSTS:
            cluster.start_api(host)
    except BaseException:
        close_cluster(cluster)
        raise
    return cluster


def close_cluster(cluster: Cluster, keep_logs: bool = False) -> None:
    """Stop everything, delete the namespaces, and remove the work dir."""
    cluster.network.close()
    if not keep_logs:
        shutil.rmtree(cluster.workdir, ignore_errors=True)
