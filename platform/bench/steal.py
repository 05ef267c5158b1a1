"""How much CPU the hypervisor took from this machine while a bench level ran (steal time).

On a virtual machine the host may run other guests on this one's cores. The time a virtual
core was ready but not running is "steal" in /proc/stat. On the 2-core development VM it was
about 10% of all CPU time during `bench overload`, in bursts long enough that a stalled API
process missed a 30-60 ms TTFT yardstick several times over. No arrangement inside the guest
removes it, so a bench reports it per level beside the figures it may have spoiled.

The share is of all CPU time, idle included: on a half-idle machine it understates how long
a process that wanted to run was held.

Linux only; elsewhere the share is reported as unknown (NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STAT = Path("/proc/stat")
STEAL_FIELD = 7  # user nice system idle iowait irq softirq steal guest guest_nice


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The machine's CPU time so far, in clock ticks: stolen, and in all."""

    steal: int
    total: int

    @classmethod
    def now(cls) -> CpuTimes | None:
        """The counters now; None where /proc/stat is missing."""
        try:
            first = STAT.read_text().split("\n", 1)[0].split()
            ticks = [int(value) for value in first[1:9]]  # guest time is already in user
        except (OSError, ValueError):
            return None
        if len(ticks) <= STEAL_FIELD:  # a kernel too old to count steal
            return None
        return cls(steal=ticks[STEAL_FIELD], total=sum(ticks))


def steal_share(before: CpuTimes | None, after: CpuTimes | None) -> float:
    """The share of CPU time stolen between two readings (NaN when unknown)."""
    if before is None or after is None or after.total <= before.total:
        return float("nan")
    return (after.steal - before.steal) / (after.total - before.total)
