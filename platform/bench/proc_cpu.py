"""CPU time one process has used, read from /proc: what a bench level cost the API process.

On a 2-core machine the engine, the API and the load generator share the cores, so CPU the
API spends refusing requests under overload is CPU the engine does not get. `bench
overload` reports each API process's CPU per level, in cores and in milliseconds per
request offered, so that cost is measured rather than guessed.

Linux only; elsewhere the figures are unknown (None, shown as NaN).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

UTIME_FIELD = 11  # counted after the command's closing parenthesis: state is field 0


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds `pid` has used so far (its own threads, not its children).

    From the scheduler's own count, in nanoseconds, summed over the process's live threads
    (`/proc/<pid>/task/*/schedstat`); where the kernel keeps no such count, from the user and
    system time in `/proc/<pid>/stat`, kept in clock ticks (10 ms here) and charged by
    sampling: too coarse for a bench round of a few tenths of a second."""
    precise = _scheduled_seconds(pid)
    return precise if precise is not None else _ticked_seconds(pid)


def _scheduled_seconds(pid: int) -> float | None:
    try:
        stats = list(Path(f"/proc/{pid}/task").glob("*/schedstat"))
        total = 0
        for stat in stats:
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                total += int(stat.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9 if stats else None


def _ticked_seconds(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
        ticks = int(fields[UTIME_FIELD]) + int(fields[UTIME_FIELD + 1])
    except (OSError, ValueError, IndexError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_between(before: float | None, after: float | None) -> float:
    """CPU seconds between two readings (NaN when either is unknown)."""
    if before is None or after is None:
        return float("nan")
    return after - before
