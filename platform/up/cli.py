"""`loraplex up`: the whole platform on one machine, with no external services.

It owns, as child processes: the API (SQLite, the local object store, in-process Redis
stand-in), a Celery worker and beat (kombu's filesystem broker in the data dir) and the
CPU engine (SGLang, installed on first run). On first run it also generates the base model,
trains three demo adapters and seeds a demo tenant with logins and a key; later runs reuse
all of it. Ctrl-C or SIGTERM stops every child.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import click
import httpx

from loraplex.connections import open_object_store
from loraplex.serving.engines.launcher import EngineConfig, read_pid, stop_engine
from loraplex.settings import Settings
from loraplex.up.base_model import prepare_base_model
from loraplex.up.children import ChildFailed, Process, Supervisor, stop_leftovers, tail
from loraplex.up.demo import (
    ADAPTERS,
    Credentials,
    DemoSeeder,
    SeedError,
    adapter_dir,
    train_adapter,
)
from loraplex.up.engine import (
    ENGINE_PORT,
    EngineChild,
    cannot_run_here,
    engine_api_key,
    engine_config,
)
from loraplex.up.layout import BASE_MODEL, Layout
from loraplex.up.ready import print_ready
from loraplex.workers.cli import ALL_QUEUES

TICK_S = 5.0  # the terminal is never silent longer than this during a long step


class Stop(Exception):
    """SIGINT or SIGTERM arrived."""


class UpError(click.ClickException):
    """A problem `up` explains and exits on (exit code 2)."""

    exit_code = 2


def say(line: str) -> None:
    """One line of progress on the terminal."""
    click.echo(line)
    sys.stdout.flush()


@contextlib.contextmanager
def step(name: str, timings: dict[str, float]) -> Iterator[None]:
    """A named first-run step: says when it starts, ticks while it runs, records its time."""
    say(f"- {name}")
    started = time.monotonic()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(TICK_S):
            say(f"  ... {name} ({time.monotonic() - started:.0f}s)")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        timings[name] = time.monotonic() - started


@click.command()
@click.option("--port", type=int, default=None, help="API port (default: LORAPLEX_PORT, 8000)")
@click.option("--engine-port", type=int, default=ENGINE_PORT, show_default=True)
@click.option("--reset", is_flag=True, help="Delete what earlier runs made and start over.")
@click.option(
    "--no-engine",
    is_flag=True,
    help="Start no local engine; serve with the engines in LORAPLEX_ENGINES instead.",
)
@click.pass_obj
def up(
    settings: Settings, port: int | None, engine_port: int, reset: bool, no_engine: bool
) -> None:
    """Start the whole platform on this machine: API, console, worker, beat and engine."""
    settings = embedded_settings(settings, port)
    layout = Layout(settings.data_dir)
    check_data_dir(layout.root)
    engine = None if no_engine else engine_config(layout, engine_port)
    if reset:
        reset_data(layout, engine)
    if engine is not None:  # the API authenticates to the engine with the same key
        key = engine_api_key(layout, settings.engine_api_key)
        settings, engine = replace(settings, engine_api_key=key), replace(engine, api_key=key)
        if not settings.admission_profiles:  # its engine runs on this CPU: the CPU profile
            settings = replace(settings, admission_profiles=f"{engine.kind}={engine.kind}-cpu")
    why_not = None if engine is None else cannot_run_here()
    if why_not:
        raise UpError(
            f"{why_not}.\nRun `loraplex up --no-engine` and point LORAPLEX_ENGINES at an engine "
            f'elsewhere, e.g.\n  LORAPLEX_ENGINES=\'[{{"name": "gpu-1", "url": '
            f'"http://gpu-host:30000", "kind": "sglang", "base_model": "{BASE_MODEL}"}}]\''
        )
    left = stop_leftovers(layout.pids)
    if left:
        say(f"- stopped what a previous run left running: {', '.join(left)}")
    check_port(settings.host, settings.port, "API", "--port or LORAPLEX_PORT")
    if engine is not None and not _our_engine_runs(engine):
        check_port(engine.host, engine.port, "engine", "--engine-port")

    supervisor = Supervisor(say)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        started = time.monotonic()
        timings, credentials = start_platform(settings, layout, engine, supervisor)
        print_ready(settings, credentials, engine, timings, time.monotonic() - started, say)
        while True:
            supervisor.check()
            time.sleep(0.5)
    except Stop:
        say("\nstopping ...")
    except (ChildFailed, SeedError) as exc:
        say(f"\nerror: {exc}")
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop
        supervisor.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    say("stopped: no child process is left" if code == 0 else "stopped")
    sys.exit(code)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise Stop


def start_platform(
    settings: Settings, layout: Layout, engine: EngineConfig | None, supervisor: Supervisor
) -> tuple[dict[str, float], Credentials]:
    """Bring every part up, in order, doing first-run work only where it is missing.

    The engine starts on a thread first (its install and start are the longest steps) while
    the API, the worker and the demo data come up; its registration comes last.
    """
    timings: dict[str, float] = {}
    env = {**os.environ, **settings.to_env()}
    with step("database", timings):
        operator_key = prepare_database(settings, layout)
    with step("base model", timings):
        prepare_base_model(open_object_store(settings), layout, say)
    engine_thread = None
    if engine is not None:
        say(f"- engine: SGLang on CPU at {engine.url} (log: {engine.log_file})")
        child = EngineChild(engine, say)
        supervisor.children.append(child)
        engine_thread = Background(child.start)
    api_url = f"http://{settings.host}:{settings.port}"
    with step("API", timings):
        supervisor.start(api_process(settings, layout, env, api_url))
    with step("worker and beat", timings):
        supervisor.start(worker_process(layout, env))
        beat = Process("beat", ["beat"], env, layout.log_of("beat"), pid_file=layout.pid_of("beat"))
        supervisor.start(beat)
    untrained = [s for s in ADAPTERS if not adapter_dir(layout, s).exists()]
    if untrained:
        with step("demo adapters", timings):
            for spec in untrained:
                say(f"  training {spec.persona} (rank {spec.rank})")
                train_adapter(spec, layout.model_dir, adapter_dir(layout, spec),
                              layout.log_of("adapters"))  # fmt: skip
    with step("demo tenant", timings):
        credentials = seed_demo(api_url, operator_key, layout)
    if engine_thread is not None and engine is not None:
        with step("engine taking requests", timings):  # it may still be installing
            engine_thread.result()
            register_engine(api_url, operator_key, engine)
    return timings, credentials


class Background(threading.Thread):
    """Run `work` on a thread; `result()` waits and re-raises what it raised."""

    def __init__(self, work: Callable[[], None]):
        super().__init__(daemon=True)
        self.work = work
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:
            self.error = exc

    def result(self) -> None:
        while self.is_alive():
            self.join(0.2)
        if self.error is not None:
            raise self.error


def embedded_settings(settings: Settings, port: int | None) -> Settings:
    """The settings `up` runs with: the database in the data dir unless one is configured."""
    layout = Layout(settings.data_dir.resolve())
    changes: dict[str, object] = {"data_dir": layout.root}
    if "LORAPLEX_DATABASE_URL" not in os.environ:
        changes["database_url"] = layout.database_url
    if port is not None:
        changes["port"] = port
    return replace(settings, **changes)


def check_data_dir(root: Path) -> None:
    """A clear error when the data dir cannot be written."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-check"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UpError(
            f"the data dir {root} is not writable ({exc.strerror}); "
            f"set LORAPLEX_DATA_DIR to a folder you can write"
        ) from exc


def check_port(host: str, port: int, what: str, option: str) -> None:
    """A clear error when `port` is taken (by a listener: TIME_WAIT connections left by a
    previous run do not count, as servers bind with SO_REUSEADDR)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise UpError(
                f"port {port} on {host} (the {what}) is in use by another program; stop it or "
                f"choose another port with {option}"
            ) from exc


def _our_engine_runs(config: EngineConfig) -> bool:
    return read_pid(config) is not None


def reset_data(layout: Layout, engine: EngineConfig | None) -> None:
    """Stop the engine a previous run left and delete everything `up` made."""
    if engine is not None:
        stop_engine(engine)
    for path in layout.owned():
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    say(f"- reset: removed what earlier runs made in {layout.root}")


def prepare_database(settings: Settings, layout: Layout) -> str:
    """Migrate, and make the operator (key and console password) once; return the key."""
    from loraplex.db import migrate

    migrate.upgrade(settings.database_url)
    credentials = Credentials.load_or_make(layout.credentials)
    return ensure_operator(settings, layout, credentials)


def ensure_operator(settings: Settings, layout: Layout, credentials: Credentials) -> str:
    """The operator's API key (minted once into `operator.key`) and console password."""
    from loraplex.control.bootstrap import create_operator, set_password
    from loraplex.db.config import run_in_session

    path = layout.root / "operator.key"

    async def mint(session: Any) -> str:
        email, password = credentials.operator_email, credentials.operator_password
        key = await create_operator(session, email, "operator")
        # Once, with the key: a new hash would end the operator's console sessions.
        await set_password(session, email, password)
        return key

    if not path.exists():
        key = run_in_session(settings, mint)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
    return path.read_text().strip()


def api_process(settings: Settings, layout: Layout, env: dict[str, str], url: str) -> Process:
    """The API server child, ready when `/healthz` answers."""

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    args = ["api", "--host", settings.host, "--port", str(settings.port)]
    return Process(
        "api", args, env, layout.log_of("api"), ready=healthy, pid_file=layout.pid_of("api")
    )


def worker_process(layout: Layout, env: dict[str, str]) -> Process:
    """The Celery worker child, ready when it says so in its log."""
    log = layout.log_of("worker")
    offset = log.stat().st_size if log.exists() else 0

    def ready() -> bool:
        with contextlib.suppress(OSError), open(log, "rb") as handle:
            handle.seek(offset)
            return b" ready." in handle.read()
        return False

    args = ["worker", "-Q", ALL_QUEUES, "-c", "1", "-n", "loraplex@embedded"]
    return Process(
        "worker", args, env, log, ready=ready, ready_timeout_s=120, pid_file=layout.pid_of("worker")
    )


def seed_demo(api_url: str, operator_key: str, layout: Layout) -> Credentials:
    """The demo tenant, its logins, key, adapters and training file (each made once)."""
    credentials = Credentials.load_or_make(layout.credentials)
    seeder = DemoSeeder(api_url, operator_key, layout, credentials)
    try:
        seeder.register_base_model()
        tenant_id = seeder.tenant()
        for spec in ADAPTERS:
            seeder.adapter(tenant_id, spec)
        seeder.training_file()
    finally:
        seeder.close()
    return credentials


def register_engine(api_url: str, operator_key: str, engine: EngineConfig) -> None:
    """Register the local engine with the API (once) and wait until it takes requests."""
    ops = {"Authorization": f"Bearer {operator_key}"}
    with httpx.Client(base_url=api_url, headers=ops, timeout=30) as http:
        listed = http.get("/api/v1/engines", params={"limit": 500}).json()["items"]
        found = next((e for e in listed if e["url"] == engine.url), None)
        if found is None:
            body = {
                "name": f"local-{engine.kind}-{engine.port}",
                "url": engine.url,
                "kind": engine.kind,
                "base_model": BASE_MODEL,
                "max_lora_rank": engine.max_lora_rank,
                "gpu_slots": engine.max_loras,
                "host_slots": engine.max_cpu_loras,
            }
            response = http.post("/api/v1/engines", json=body)
            if response.status_code != 201:
                raise SeedError(f"registering the engine: {response.status_code} {response.text}")
            found = response.json()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = http.get(f"/api/v1/engines/{found['id']}").json().get("live") or {}
            if live.get("in_rotation"):
                return
            time.sleep(0.5)
    raise ChildFailed("engine", f"not in rotation after 120s\n{tail(engine.log_file)}")
