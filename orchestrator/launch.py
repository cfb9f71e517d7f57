"""Run one trial in a fresh Python process and wait for it, killing its whole process group on
timeout, on interruption and if the orchestrator dies. Never imports torch."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.faultpoints import reached
from orchestrator.timeline import event
from orchestrator.outcome import Outcome, classify

POLL_S = 0.05


class StopFlag:
    """Set by SIGINT/SIGTERM handlers; kills the running trial's process group at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.pgid: int | None = None

    def trip(self, signum: int, _frame: Any = None) -> None:
        self.signum = signum
        if self.pgid is not None:
            _kill_group(self.pgid)

    @property
    def tripped(self) -> bool:
        return self.signum is not None


@dataclass
class Launched:
    outcome: Outcome
    returncode: int | None
    duration_s: float
    peak_rss_gib: float | None
    log_path: Path


def _die_with_parent(parent: int) -> None:
    """preexec_fn (Linux): signal this child when the orchestrator dies, even by SIGKILL. SIGTERM,
    not SIGKILL, so that the trial's handler can take its whole process group down with it
    (compile workers, data-loader workers: grandchildren PDEATHSIG alone would orphan)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def launch_trial(config: dict[str, Any], trial_dir: Path, env: dict[str, str], timeout_s: float,
                 stop: StopFlag | None = None) -> Launched:
    """Start ``python -m orchestrator.harness`` for ``config`` and wait for it to end."""
    import subprocess

    trial_dir.mkdir(parents=True, exist_ok=True)
    config_path, result_path, log_path = (trial_dir / "config.json", trial_dir / "result.json",
                                          trial_dir / "trial.log")
    for stale in (result_path, Path(f"{result_path}.tmp")):
        stale.unlink(missing_ok=True)
    config = {**config, "result_path": str(result_path)}
    config_path.write_text(json.dumps(config, indent=1, default=str))
    child_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1",
                 "ORCHESTRATE_RESULT_PATH": str(result_path)}
    parent = os.getpid()
    started = time.monotonic()
    event("start", config.get("trial_number"))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.harness", str(config_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env,
            start_new_session=True, preexec_fn=lambda: _die_with_parent(parent),
            cwd=os.getcwd())
    if stop is not None:
        stop.pgid = proc.pid
        if stop.tripped:  # a signal arrived while the process was starting
            _kill_group(proc.pid)
    timed_out = False
    rusage = None
    reached("trial_running")
    try:
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - started > timeout_s and not timed_out:
                timed_out = True
                _kill_group(proc.pid)
            time.sleep(POLL_S)
    finally:
        if proc.returncode is None:  # leaving by an exception: take the trial down with us
            _kill_group(proc.pid)
        _kill_group(proc.pid)  # grandchildren left in the group
        if stop is not None:
            stop.pgid = None
    duration = time.monotonic() - started
    event("exited", config.get("trial_number"))
    text = result_path.read_text(errors="replace") if result_path.exists() else None
    # A trial that ended by itself with a result keeps it even if Ctrl-C came just after.
    interrupted = stop is not None and stop.tripped and not (proc.returncode == 0 and text)
    outcome = classify(proc.returncode, text, timed_out=timed_out, interrupted=interrupted, timeout_s=timeout_s,
                       log_tail=_last_line(log_path))
    maxrss = rusage.ru_maxrss if rusage is not None else None
    peak = None if not maxrss else maxrss / (1024 ** 3 if sys.platform == "darwin" else 1024 ** 2)
    return Launched(outcome, proc.returncode, duration, peak, log_path)


def _last_line(path: Path, limit: int = 300) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:limit] if lines else None
