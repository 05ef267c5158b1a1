"""The processes `loraplex up` owns: started by pid, watched, restarted, stopped together.

Each child runs in its own process group, so a stop reaches the processes it started too
(uvicorn's, Celery's and SGLang's own workers), and the terminal's Ctrl-C reaches only `up`,
which then stops the children in order. A child that dies is restarted; one that keeps
dying (`MAX_RESTARTS` within `RESTART_WINDOW_S`) stops the platform with its name, rather
than leaving something that looks up but cannot serve.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from loraplex.serving.engines.launcher import process_alive

Say = Callable[[str], None]
MAX_RESTARTS = 3
RESTART_WINDOW_S = 300.0
STOP_GRACE_S = 8.0


class ChildFailed(RuntimeError):
    """A child could not be started, or died too often to keep restarting."""

    def __init__(self, name: str, why: str):
        super().__init__(f"{name}: {why}")
        self.name = name


class Child(Protocol):
    """Something `up` runs: started, checked and stopped by the supervisor."""

    name: str

    def start(self) -> None:
        """Start it and return once it is ready (raises ChildFailed otherwise)."""
        ...

    def exit_code(self) -> int | None:
        """None while it runs; its exit status (or -1) once it is gone."""
        ...

    def stop(self) -> None:
        """Stop it and everything it started."""
        ...

    @property
    def log(self) -> Path:
        """Where its output goes."""
        ...


@dataclass
class Process:
    """A `loraplex <command>` process with its output in `log`."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    ready: Callable[[], bool] = lambda: True  # polled after the start
    ready_timeout_s: float = 60.0
    pid_file: Path | None = None  # records the group, for `stop_leftovers` after a crash
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Run it in its own process group and wait until `ready()`."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "loraplex.cli", *self.args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if self.pid_file is not None:
            self.pid_file.parent.mkdir(parents=True, exist_ok=True)
            self.pid_file.write_text(str(self.proc.pid))
        deadline = time.monotonic() + self.ready_timeout_s
        while not self.ready():
            if self.proc.poll() is not None:
                raise ChildFailed(self.name, f"exited during startup\n{tail(self.log)}")
            if time.monotonic() > deadline:
                raise ChildFailed(self.name, f"not ready after {self.ready_timeout_s:.0f}s")
            time.sleep(0.2)

    def exit_code(self) -> int | None:
        """None while running."""
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        """SIGTERM the group, then SIGKILL what is left after the grace period."""
        if self.proc is None:
            return
        stop_group(self.proc.pid, lambda: self.proc is not None and self.proc.poll() is None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1)
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)


def stop_leftovers(pid_dir: Path) -> list[str]:
    """Stop the process groups a previous `up` recorded and never stopped (it was killed
    with SIGKILL, or its machine lost power); return their names."""
    stopped = []
    for pid_file in sorted(pid_dir.glob("*.pid")):
        with contextlib.suppress(OSError, ValueError):
            pgid = int(pid_file.read_text().strip())
            # A recycled pid belongs to someone else: only stop one running our command.
            if b"loraplex.cli" in Path(f"/proc/{pgid}/cmdline").read_bytes():
                stop_group(pgid, lambda pgid=pgid: process_alive(pgid))
                stopped.append(pid_file.stem)
        pid_file.unlink(missing_ok=True)
    return stopped


def stop_group(pgid: int, alive: Callable[[], bool], grace_s: float = STOP_GRACE_S) -> None:
    """Stop process group `pgid`: SIGTERM, wait up to `grace_s`, then SIGKILL the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    # Also when the leader is gone: its own children (a Celery pool process) may linger.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@dataclass
class Supervisor:
    """Starts children in order, restarts the ones that die, stops them all together."""

    say: Say
    children: list[Child] = field(default_factory=list)
    _deaths: dict[str, list[float]] = field(default_factory=dict)

    def start(self, child: Child) -> None:
        """Start `child` and keep it from now on (it is stopped with the others)."""
        self.children.append(child)
        child.start()

    def check(self) -> None:
        """Restart any child that died; ChildFailed when one died too often."""
        for child in self.children:
            code = child.exit_code()
            if code is None:
                continue
            now = time.monotonic()
            deaths = [t for t in self._deaths.get(child.name, []) if now - t < RESTART_WINDOW_S]
            deaths.append(now)
            self._deaths[child.name] = deaths
            if len(deaths) > MAX_RESTARTS:
                raise ChildFailed(
                    child.name,
                    f"exited (code {code}) {len(deaths)} times in {RESTART_WINDOW_S:.0f}s; "
                    f"its log: {child.log}\n{tail(child.log)}",
                )
            self.say(f"! {child.name} exited (code {code}); restarting it (log: {child.log})")
            child.stop()  # whatever it left in its group
            child.start()
            self.say(f"  {child.name} is back")

    def stop_all(self) -> None:
        """Stop every child at once (each waits out its own grace period), so the whole stop
        takes as long as the slowest child, not their sum."""
        stoppers = [threading.Thread(target=_quietly, args=(c.stop,)) for c in self.children]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        self.children.clear()


def _quietly(stop: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        stop()


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log, indented, for a message."""
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in text)
