"""No process outlives a killed orchestrator, even one killed during its start-up (issue #21,
item 3): the experiment probe (which imports torch, then runs the smoke step) and the slots'
fork servers must die with it, as trials do.

The real ``orchestrate`` command, SIGKILLed at seeded random moments of its start-up; a second
later no process it started may be alive. Its processes are found by an environment marker that
every process it starts inherits (forked ones included), and by the test's own folder on their
command line. The experiment starts a process of its own when imported (as a data-loader pool or
a compile worker might): what the probe (or a fork server) started must die with it too.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, write_spec
from procs import processes

pytestmark = pytest.mark.slow

MARK = "ORCHESTRATE_TEST_KILL_MARK"
KILLS = 6
SEED = 21
EXPERIMENT = '''"""The fault-injection experiment, which starts a child process when it is imported."""
import subprocess

subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

from experiments.faults import build, validate_params  # noqa: E402, F401
'''


def started_by(marker: str, folder: Path) -> dict[int, str]:
    """Live processes (zombies are dead) carrying ``MARK=marker`` in their environment or
    ``folder`` on their command line: {pid: command line} (Linux ``/proc``)."""
    wanted = f"{MARK}={marker}".encode()
    return {p.pid: p.cmdline for p in processes() if wanted in (p.environ() or []) or str(folder) in p.cmdline}


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_no_process_outlives_an_orchestrator_killed_during_start_up(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    marker = uuid.uuid4().hex
    left: dict[float, dict[int, str]] = {}
    harness_running_at_kill = child_running_at_kill = 0
    try:
        for i in range(KILLS):
            project = tmp_path / f"kill{i}"
            project.mkdir()
            (project / "spawning.py").write_text(EXPERIMENT)
            spec = write_spec(project, """
                name: startup
                experiment: spawning
                device: cpu
                fixed: {batch_size: 4, fault: none}
                space:
                  hidden_size: [8, 16]
                search: {sampler: grid}
                trial: {warmup_steps: 1, measure_steps: 1, min_measure_s: 0.01, timeout_s: 60}
                """)
            proc = subprocess.Popen([ORCHESTRATE, str(spec)], cwd=project, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env={**os.environ, MARK: marker})
            started = time.monotonic()
            if i == KILLS - 1:  # the last kill, whatever the load: while the experiment's own child runs
                while not any(cmd.startswith("sleep") for cmd in started_by(marker, tmp_path).values()):
                    assert proc.poll() is None and time.monotonic() < started + 120, "the experiment never started"
                    time.sleep(0.02)
                time.sleep(rng.uniform(0, 0.3))
            else:  # the others at a random moment of the start-up (on a loaded machine, all before the child)
                time.sleep(rng.uniform(0.1, 2.5))
            after = time.monotonic() - started
            running = started_by(marker, tmp_path)
            harness_running_at_kill += any("orchestrator.harness" in cmd for cmd in running.values())
            child_running_at_kill += any(cmd.startswith("sleep") for cmd in running.values())
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            deadline = time.monotonic() + 1.0
            while (alive := started_by(marker, tmp_path)) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive:
                left[round(after, 2)] = alive
                for pid in alive:  # this test's own leftovers, so that the next kill starts clean
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
    finally:
        for pid in started_by(marker, tmp_path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert harness_running_at_kill >= 1, "no kill came while a harness process ran: the test tested nothing"
    assert child_running_at_kill >= 1, "no kill came while the experiment's own child ran"
    assert left == {}, (f"{sum(map(len, left.values()))} process(es) alive 1 s after {len(left)} of {KILLS} kills of "
                        f"the orchestrator (seconds after its start: processes): {left}")
