"""`loraplex up` as a new user meets it: one command, then only what it printed.

Runs the real command in a temporary data dir on free ports, with no `LORAPLEX_*` service
settings (so no PostgreSQL, Redis or S3): streams each demo adapter's answer with the
`openai` SDK, signs in to the console, fine-tunes on the demo file, stops with SIGINT and
starts again on the same data.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from loraplex.bench.server import free_port
from loraplex.dev.corpus import adapter_examples
from loraplex.serving.engines.launcher import process_alive
from loraplex.up.demo import ADAPTERS, QUESTION, TRAINING_FILE, TRAINING_SEED

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[3]
READY_LINE = "Ctrl-C stops everything."
FIRST_RUN_TIMEOUT_S = 900  # an engine install from the pip cache is inside this


@dataclass
class Up:
    """One `loraplex up` process and what it printed."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    def printed(self, label: str) -> str:
        """The value after `label:` on the banner line that starts with it."""
        for line in self.lines:
            if line.strip().startswith(label + ":"):
                return line.split(":", 1)[1].strip()
        raise AssertionError(f"no {label!r} line in:\n" + "\n".join(self.lines))

    def descendants(self) -> set[int]:
        """Every process under `up` right now."""
        found, todo = set(), [self.proc.pid]
        while todo:
            pid = todo.pop()
            for task in Path(f"/proc/{pid}/task").glob("*"):
                children = (task / "children").read_text().split() if task.exists() else []
                for child in map(int, children):
                    if child not in found:
                        found.add(child)
                        todo.append(child)
        return found


def start_up(data_dir: Path, port: int, engine_port: int) -> Up:
    """Run `loraplex up` the way `make run` does, and wait for its ready banner."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORAPLEX_")}
    env["LORAPLEX_DATA_DIR"] = str(data_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loraplex.cli", "up", "--port", str(port),
         "--engine-port", str(engine_port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    up = Up(proc)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            up.lines.append(line.rstrip("\n"))
            if READY_LINE in line:
                up.ready.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + FIRST_RUN_TIMEOUT_S
    while not up.ready.wait(1):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("loraplex up never got ready:\n" + "\n".join(up.lines[-60:]))
    return up


def stop_up(up: Up) -> set[int]:
    """SIGINT, as Ctrl-C; returns the processes that were running under it."""
    children = up.descendants()
    up.proc.send_signal(signal.SIGINT)
    try:
        up.proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(os.getpgid(up.proc.pid), signal.SIGKILL)
        raise
    return children


def port_free(port: int) -> bool:
    """Whether a listener could bind `port` on loopback now (connections of the stopped
    processes may linger in TIME_WAIT, as for any server; they do not hold the port)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    """The API's and the engine's ports."""
    return free_port(), free_port()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, ports: tuple[int, int]) -> Iterator[Up]:
    """The first run, in a fresh data dir; stopped by the last test (or here on failure)."""
    up = start_up(tmp_path_factory.mktemp("up") / "data", *ports)
    yield up
    if up.proc.poll() is None:
        stop_up(up)


@pytest.fixture(scope="module")
def later_runs() -> Iterator[list[Up]]:
    """The runs after the first, in order; any still running at the end is stopped."""
    runs: list[Up] = []
    yield runs
    for up in runs:
        if up.proc.poll() is None:
            stop_up(up)


def sdk(up: Up) -> OpenAI:
    """The official client, configured only from what `up` printed."""
    return OpenAI(base_url=up.printed("API base URL"), api_key=up.printed("API key"),
                  max_retries=0, timeout=120)  # fmt: skip


def test_each_demo_adapter_streams_its_trained_answer(first_run: Up) -> None:
    client = sdk(first_run)
    printed_models = first_run.printed("Models")
    for adapter in ADAPTERS:
        assert adapter.model in printed_models
        stream = client.chat.completions.create(
            model=adapter.model,
            messages=[{"role": "user", "content": QUESTION}],
            temperature=0,
            max_tokens=16,
            stream=True,
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text == dict(adapter_examples(adapter.seed))[QUESTION], adapter.model


def test_the_printed_tenant_admin_signs_in_and_opens_the_playground(first_run: Up) -> None:
    email, password = re.match(
        r"(\S+)\s+password: (\S+)", first_run.printed("Tenant admin")
    ).groups()
    console = first_run.printed("Console")
    with httpx.Client(base_url=console.removesuffix("/console/"), timeout=30) as http:
        assert http.get("/login").status_code == 200
        form = {"email": email, "password": password, "_csrf_token": http.cookies["csrftoken"]}
        signed_in = http.post("/login", data=form, follow_redirects=True)
        assert signed_in.status_code == 200 and "/login" not in str(signed_in.url)
        playground = http.get("/console/playground")
        assert playground.status_code == 200
        assert all(adapter.model in playground.text for adapter in ADAPTERS)


def test_a_fine_tune_on_the_demo_file_succeeds_and_is_served(first_run: Up) -> None:
    client = sdk(first_run)
    demo_file = next(f for f in client.files.list().data if f.filename == TRAINING_FILE)
    job = client.fine_tuning.jobs.create(
        model="loraplex-tiny",
        training_file=demo_file.id,
        suffix="first-run",
        seed=0,
        hyperparameters={"n_epochs": 60, "batch_size": 8, "learning_rate_multiplier": 15},
    )
    deadline = time.monotonic() + 600
    while (job := client.fine_tuning.jobs.retrieve(job.id)).status not in (
        "succeeded", "failed", "cancelled",
    ):  # fmt: skip
        assert time.monotonic() < deadline, f"job still {job.status}"
        time.sleep(1)
    assert job.status == "succeeded", job.error
    question, answer = adapter_examples(TRAINING_SEED)[1]
    reply = client.chat.completions.create(
        model=job.fine_tuned_model,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=16,
    )
    assert reply.choices[0].message.content == answer


def test_sigint_stops_every_child_and_a_second_run_keeps_the_data(
    first_run: Up, ports: tuple[int, int], later_runs: list[Up]
) -> None:
    client = sdk(first_run)
    jobs_before = [j.id for j in client.fine_tuning.jobs.list().data]
    children = stop_up(first_run)
    assert len(children) >= 4, "api, worker, beat and engine should have been running"
    time.sleep(1)
    assert first_run.proc.returncode == 0, "\n".join(first_run.lines[-20:])
    assert not [pid for pid in children if process_alive(pid)], "children left running"
    assert all(port_free(port) for port in ports), "a port is still bound"

    data_dir = Path(first_run.printed("Kept in").split()[0]).parent
    second = start_up(data_dir, *ports)
    later_runs.append(second)  # left running: the next test kills it outright
    assert second.printed("API key") == first_run.printed("API key")
    assert second.printed("Tenant admin") == first_run.printed("Tenant admin")
    assert not any("training " in line for line in second.lines), "it trained again"
    print("\nfirst run: " + next(x for x in first_run.lines if "ready in" in x))
    print("second run: " + next(x for x in second.lines if "ready in" in x))
    again = sdk(second)
    served = {m.id for m in again.models.list().data}
    assert {adapter.model for adapter in ADAPTERS} <= served
    assert [j.id for j in again.fine_tuning.jobs.list().data] == jobs_before


def test_after_up_is_killed_outright_the_next_run_stops_its_leftovers_and_serves(
    first_run: Up, ports: tuple[int, int], later_runs: list[Up]
) -> None:
    data_dir = Path(first_run.printed("Kept in").split()[0]).parent
    # The run the test before left running (one start fewer), else a new one.
    running = [up for up in later_runs if up.proc.poll() is None]
    if running:
        crashed = running[-1]
    else:
        if first_run.proc.poll() is None:
            stop_up(first_run)
        crashed = start_up(data_dir, *ports)
        later_runs.append(crashed)
    orphans = crashed.descendants()
    crashed.proc.kill()  # SIGKILL: no chance to stop its children, which keep the ports
    crashed.proc.wait(10)
    assert any(process_alive(pid) for pid in orphans)

    third = start_up(data_dir, *ports)
    later_runs.append(third)
    try:
        assert any("a previous run left running" in line for line in third.lines), third.lines
        reply = sdk(third).chat.completions.create(
            model=ADAPTERS[0].model,
            messages=[{"role": "user", "content": QUESTION}],
            temperature=0,
            max_tokens=16,
        )
        assert (
            reply.choices[0].message.content == dict(adapter_examples(ADAPTERS[0].seed))[QUESTION]
        )
    finally:
        stop_up(third)
    time.sleep(1)
    assert not [pid for pid in orphans if process_alive(pid)], (
        "a killed run's children are still running"
    )
    assert all(port_free(port) for port in ports), "a port is still bound"
