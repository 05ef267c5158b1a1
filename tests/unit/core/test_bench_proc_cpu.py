"""The overload bench reports how much CPU each API process spent on a level."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from loraplex.bench.proc_cpu import cpu_between, cpu_seconds


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/<pid>/stat is Linux's")
def test_a_busy_process_shows_the_cpu_it_spent_and_an_idle_one_none() -> None:
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    code = busy + "import sys; sys.stdin.read()"  # then wait, idle, until told to end
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE) as proc:
        deadline = time.monotonic() + 10
        while (cpu_seconds(proc.pid) or 0) < 0.3 and time.monotonic() < deadline:
            os.sched_yield()
        busy_for = cpu_seconds(proc.pid) or 0
        time.sleep(0.2)  # now waiting on its stdin: no more CPU
        idle = cpu_between(busy_for, cpu_seconds(proc.pid))
        proc.communicate(b"")
    assert busy_for >= 0.3 and idle < 0.05


def test_a_process_that_is_gone_has_no_figure() -> None:
    assert cpu_seconds(2**22 + 12345) is None  # past Linux's largest pid
    assert math.isnan(cpu_between(None, 1.0))
