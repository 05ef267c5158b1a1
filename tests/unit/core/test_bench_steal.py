"""The overload bench reports how much CPU the hypervisor took while a level ran."""

from __future__ import annotations

import math
import sys

import pytest

from loraplex.bench.steal import CpuTimes, steal_share


def test_steal_is_the_stolen_share_of_the_time_between_two_readings() -> None:
    assert steal_share(CpuTimes(steal=10, total=1000), CpuTimes(steal=60, total=1500)) == 0.1


def test_steal_is_unknown_without_both_readings() -> None:
    assert math.isnan(steal_share(None, CpuTimes(steal=1, total=2)))
    assert math.isnan(steal_share(CpuTimes(steal=1, total=2), CpuTimes(steal=1, total=2)))


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/stat is Linux's")
def test_the_counters_are_read_from_proc_stat() -> None:
    times = CpuTimes.now()
    assert times is not None and 0 <= times.steal <= times.total
