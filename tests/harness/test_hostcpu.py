"""The host's CPU used by other processes during a window (``harness/hostcpu.py``): the arithmetic
on ``/proc/stat``'s ticks, and real readings on this machine with a busy process beside and with
this process busy itself (its own time is not counted as others')."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.harness import hostcpu


def stat(path: Path, user: int, idle: int, iowait: int = 0, steal: int = 0) -> str:
    path.write_text(f"cpu  {user} 0 0 {idle} {iowait} 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    return str(path)


def test_others_are_the_busy_ticks_less_this_process_s_own_over_all_ticks(tmp_path: Path) -> None:
    f = tmp_path / "stat"
    a = hostcpu.read(stat(f, user=1000, idle=3000, iowait=100, steal=0))
    assert (a.busy, a.total) == (1000, 4100)
    b = hostcpu.read(stat(f, user=1500, idle=3400, iowait=100, steal=100))  # 1,000 ticks: 600 busy (steal too)
    own = hostcpu.CpuSample(b.busy, b.total, a.own_s + 2.0)  # this process: 2 s = 200 ticks at 100 Hz
    assert hostcpu.others_busy(a, own, hz=100) == pytest.approx((600 - 200) / 1000)
    assert hostcpu.others_busy(a, hostcpu.CpuSample(b.busy, b.total, a.own_s + 9.0), hz=100) == 0.0  # clamped
    assert hostcpu.others_busy(a, a, hz=100) is None  # no tick between: nothing to tell
    nowhere = hostcpu.read(str(tmp_path / "absent"))
    assert nowhere.busy is None and hostcpu.others_busy(nowhere, nowhere) is None  # not Linux: None, not 0


def spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="Linux only")
def test_a_busy_process_beside_counts_and_this_process_s_own_work_does_not() -> None:
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        a = hostcpu.read()
        time.sleep(1.0)
        beside = hostcpu.others_busy(a, hostcpu.read())
    finally:
        burner.kill()
        burner.wait()
    assert beside is not None and beside >= 0.6 / (os.cpu_count() or 1), beside  # one busy core of the host's
    a = hostcpu.read()
    spin(1.0)
    b = hostcpu.read()
    raw = (b.busy - a.busy) / (b.total - a.total)  # type: ignore[operator]
    own_share = (b.own_s - a.own_s) * os.sysconf("SC_CLK_TCK") / (b.total - a.total)  # type: ignore[operator]
    assert b.own_s - a.own_s >= 0.98  # (the kernel counts in ticks: 1 s spun read once as 0.99) its own second of CPU (a share of the host's that a loaded machine makes small)
    assert hostcpu.others_busy(a, b) == pytest.approx(max(0.0, raw - own_share), abs=1e-9)
