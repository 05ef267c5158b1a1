"""Hosts as Linux network namespaces on one private bridge, and the processes they run.

A `Network` makes one namespace per host (`ip netns add`), joins each to a bridge in the
root namespace with a veth pair, gives it an address on a private /24 and brings `lo` up.
Every process is started with `ip netns exec` (which execs, so the Popen PID is the
process itself), tracked by PID and stopped with its own signal, then SIGKILL. `close()`
stops every process and deletes every namespace and link; an atexit guard calls it too,
so a crashed session leaves nothing behind. Names carry the test process's PID, so two
sessions never collide.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class NetnsUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, or no iproute2)."""


def why_unavailable() -> str | None:
    """The reason namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "system tests make network namespaces: run them as root"
    if shutil.which("ip") is None:
        return "system tests need iproute2's `ip` command"
    probe = f"lpx{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def leftovers(prefix: str) -> list[str]:
    """Namespaces and links whose names start with `prefix` (none, after `close()`)."""
    names = []
    for listing in (["netns", "list"], ["-o", "link", "show"]):
        out = subprocess.run(["ip", *listing], capture_output=True, text=True).stdout
        names += [word.rstrip(":@") for word in out.split() if word.startswith(prefix)]
    return names


def _ip(*args: str) -> None:
    """Run one `ip` command; raise with its stderr when it fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Process:
    """A process one host runs, started by the network and stopped by PID."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    stop_signal: int = signal.SIGTERM
    group: bool = False  # leads its own process group: signals go to all of it (an engine's
    # workers die with it, as they would with the host)

    @property
    def pid(self) -> int:
        """The process's PID (the command itself: `ip netns exec` execs)."""
        return self.popen.pid

    @property
    def is_running(self) -> bool:
        """Whether the process has not exited."""
        return self.popen.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """Send the stop signal, then SIGKILL after `grace_s`; reap it."""
        if not self.is_running:
            if self.group:  # the leader is gone; workers it left may not be
                self.kill()
            return
        self._signal(self.stop_signal)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL, as a crash would; reap it."""
        if self.is_running or self.group:
            self._signal(signal.SIGKILL)
        self.popen.wait(10)

    def _signal(self, signum: int) -> None:
        if not self.group:
            self.popen.send_signal(signum)
            return
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
            os.killpg(self.popen.pid, signum)

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the process's output, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class Host:
    """One namespace with its address on the bridge."""

    name: str
    namespace: str
    ip: str
    veth: str  # the root-namespace end of its veth pair


@dataclass
class Network:
    """Namespaces on one bridge, `10.231.<subnet>.0/24` by default; `close()` undoes all."""

    subnet: str = "10.231.0"
    log_dir: Path = field(default_factory=lambda: Path("/tmp"))
    prefix: str = field(default_factory=lambda: f"lpx{os.getpid()}")
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)
    _bridge: str = ""
    _closed: bool = False

    def __post_init__(self) -> None:
        self._bridge = f"{self.prefix}br"[:15]
        _ip("link", "add", self._bridge, "type", "bridge")
        atexit.register(self.close)
        _ip("link", "set", self._bridge, "up")

    def add_host(self, name: str) -> Host:
        """Make namespace `<prefix>-<name>` on the bridge, with the next free address."""
        index = len(self.hosts) + 2  # .1 is left for the bridge, never assigned
        namespace = f"{self.prefix}-{name}"
        veth, peer = f"{self.prefix}v{index}"[:15], f"{self.prefix}p{index}"[:15]
        host = Host(name, namespace, f"{self.subnet}.{index}", veth)
        self.hosts[name] = host
        _ip("netns", "add", namespace)
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", namespace)
        _ip("link", "set", veth, "master", self._bridge)
        _ip("link", "set", veth, "up")
        inside = ("netns", "exec", namespace, "ip")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "link", "set", peer, "name", "eth0")
        _ip(*inside, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        return host

    def start(
        self,
        host: str,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        stop_signal: int = signal.SIGTERM,
        cwd: str | None = None,
        group: bool = False,
    ) -> Process:
        """Start `argv` inside `host`'s namespace, output to a log file; track it. With
        `group`, it leads a process group of its own and is signalled with its children."""
        log = self.log_dir / f"{self.prefix}-{host}-{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                ["ip", "netns", "exec", self.hosts[host].namespace, *argv],
                env=dict(env) if env is not None else None,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                start_new_session=group,
            )
        process = Process(name, popen, log, stop_signal, group)
        self.processes.append(process)
        return process

    def popen(self, host: str, argv: Sequence[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """A raw Popen inside `host` (pipes are the caller's); tracked like `start`."""
        popen: subprocess.Popen[bytes] = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[host].namespace, *argv],
            **kwargs,  # type: ignore[call-overload]
        )
        self.processes.append(Process(argv[0], popen, Path(os.devnull)))
        return popen

    def set_link(self, host: str, up: bool) -> None:
        """Cut (or restore) `host`'s cable: its veth end on the bridge goes down (up)."""
        _ip("link", "set", self.hosts[host].veth, "up" if up else "down")

    def close(self) -> None:
        """Stop every process (newest first), then delete every namespace and link."""
        if self._closed:
            return
        self._closed = True
        for process in reversed(self.processes):
            try:
                process.stop(grace_s=5)
            except Exception:
                process.kill()
        for host in self.hosts.values():
            subprocess.run(["ip", "link", "del", host.veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self._bridge], capture_output=True)
        atexit.unregister(self.close)
