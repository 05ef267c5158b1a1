"""CPU priority of the development engine's busy-waiting scheduler.

vLLM's EngineCore process spins (`sched_yield` in a loop) while its worker runs a batch. On
Linux's EEVDF scheduler a spinning task keeps most of its core, and on a small machine that
core is the one the engine's HTTP frontend, the API, Redis and PostgreSQL share with it.
Measured on a 2-core VM: the frontend then sent a whole reply in one burst at its end (TTFT
equal to the total time), streams of other requests stalled for seconds, and the API's
Redis calls timed out. At the lowest priority the spinner only takes what nobody else
wants, and its real work (a few ms per step) still runs; the worker that computes keeps
normal priority.

Linux only (it reads /proc); elsewhere nothing is changed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

BUSY_WAITERS = ("VLLM::EngineCor",)  # process names as /proc/<pid>/comm shows them (15 chars)
PROC = Path("/proc")


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in PROC.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return children


def descendants(root: int) -> list[int]:
    """The processes below `root`, at any depth."""
    children, found, todo = children_by_parent(), [], [root]
    while todo:
        below = children.get(todo.pop(), [])
        found.extend(below)
        todo.extend(below)
    return found


def lower_busy_waiters(root: int, nice: int, names: Iterable[str] = BUSY_WAITERS) -> int:
    """Give every thread of the named processes below `root` priority `nice`; how many
    processes were changed (0 where /proc is missing or they are gone)."""
    wanted, changed = tuple(names), 0
    for pid in descendants(root):
        try:
            name = (PROC / str(pid) / "comm").read_text().strip()
            if not name.startswith(wanted):
                continue
            for task in (PROC / str(pid) / "task").iterdir():
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
            changed += 1
        except OSError:  # it exited meanwhile, or this user may not lower it
            continue
    return changed
