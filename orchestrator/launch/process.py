"""A trial's process as the launcher holds it: started in a session of its own, heard on its
status pipe, reaped, and killed with its whole process group (on timeout, on interruption, and
when the orchestrator dies: the child's ``watch_parent``). Never imports torch.

``TrialProcess`` is what the rest of the launcher uses of one: ``Interpreter`` here (a fresh or
pre-started ``python -m orchestrator.harness --serve``), or a trial forked by a fork server
(``forked.py``). The lines on the pipes are ``orchestrator/protocol.py``'s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, Callable, Protocol

from orchestrator.harness.ahead import encode_params
from orchestrator.harness.subreaper import end_outside_group  # here, not in the signal handler: a second
# signal during the first one's import found the module half made (ImportError, the group not killed)
from orchestrator.protocol import (CPU_CORES_ENV, LEAVE, PARENT_PID_ENV, PRELOAD_ENV, SERVE_FLAG, STATUS_FD_ENV,
                                           Order, StatusLine, Word, decode_status, encode_order)
from orchestrator.timeline import event
from orchestrator.trialdir import SPARES

SPARES_DIR = SPARES
"""Where, in the study's trial folder, a pre-started process keeps its log until it has a trial."""
LEAVE_S = 5.0
"""How long a spare told to leave (and killed) is waited for before its pipes close anyway."""


def wait_until(done: Callable[[], bool], timeout_s: float) -> None:
    """Polls ``done`` every 10 ms until it is true or ``timeout_s`` has passed (a process told to
    leave or killed: the end of a sweep, a discarded spare)."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def kill_group(pgid: int) -> None:
    """Kill a trial's process group (``pgid``: its leader's pid) and, first, every descendant of
    its leader that left the group (``setsid``; ``harness.subreaper.end_outside_group``): the
    leader and its DataLoader's workers die together."""
    end_outside_group(pgid, pgid)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass



def trial_environ() -> dict[str, str]:
    """What a trial process inherits: this environment without the credentials only the
    orchestrator's own connections use (``redact.child_env``)."""
    from orchestrator.redact import child_env

    return child_env()

class StopFlag:
    """Set by SIGINT/SIGTERM handlers; kills every running trial's and spare's process group at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.pgids: set[int] = set()

    def trip(self, signum: int, _frame: object = None) -> None:
        self.signum = signum
        for pgid in list(self.pgids):
            kill_group(pgid)

    @property
    def tripped(self) -> bool:
        return self.signum is not None


class Usage(Protocol):
    """What is read of a process's resource usage: ``os.wait4``'s, or a fork server's word of it."""

    @property
    def ru_maxrss(self) -> int: ...


class TrialProcess(Protocol):
    """The process a trial runs in, as ``ProcessRun`` and the launcher use it: an ``Interpreter``
    (fresh, or pre-started) or a ``Forked`` trial of a fork server."""

    env: dict[str, str]
    """The whole environment it runs under, beyond the orchestrator's own (allocators read it once)."""
    log_path: Path
    """Where its stdout and stderr go (a pre-started interpreter's becomes its trial's log)."""
    pid: int | None
    """Its process id (a forked trial: None until the server has said it)."""
    status_fd: int | None
    """The read end of its status pipe, for ``select`` (None: closed, or the server's)."""
    ready: bool
    """Its imports are done: it can take a configuration."""
    running_since: float | None
    """When it could first run a trial (monotonic clock): its imports were done."""
    at_window: bool
    """It has finished its warm-up and waits for ``go`` before its timed window."""
    measured: bool
    """Its timed window is over (its result follows)."""
    result_ready: bool
    """Its result file is written (it may still be exiting)."""
    returncode: int | None
    """Its exit code once reaped (negative: the signal that killed it)."""
    exited_at: float | None
    """When its exit was known (wall clock; None before): the slot's memory free from then on."""
    rusage: Usage | None
    """Its resource usage once reaped (``ru_maxrss``: its peak RSS)."""
    server_died: bool
    """A forked trial: its fork server died before saying how it exited, and it died with its
    server (``Forked.reap``): cut off by the tool's own process, not ended by itself."""

    @abstractmethod
    def read_status(self) -> None:
        """Take what it said on its status pipe (non-blocking)."""

    @abstractmethod
    def reap(self) -> bool:
        """Whether it has exited (reaped: its memory is free)."""

    @abstractmethod
    def send(self, order: Order) -> None:
        """An order on its stdin (a configuration to run, ``go``, leave)."""

    @abstractmethod
    def kill(self) -> None:
        """Kill it and its process group."""

    @abstractmethod
    def close(self) -> None:
        """Close the launcher's ends of its pipes."""


class Interpreter(TrialProcess):
    """One trial process (``python -m orchestrator.harness --serve EXPERIMENT``), in its own
    process session, with a status pipe it says it is ready, at its window and done on."""

    mode = SERVE_FLAG
    server = False
    """Whether it takes a fork server's orders."""
    server_died = False
    """Never: the orchestrator itself reaps it (``TrialProcess.server_died``)."""

    def __init__(self, experiment: str, env: dict[str, str], log_path: Path,
                 cores: frozenset[int] | None = None, stop: StopFlag | None = None,
                 where: Path | None = None, fixed: dict[str, Any] | None = None) -> None:
        """``where``: the study's trial folder, shown on the command line (``ps`` tells whose it is);
        ``fixed``: the sweep's fixed parameters, for the experiment's preload hook
        (``orchestrator/harness/ahead.py``): not part of ``env``, which a trial must match."""
        self.env, self.cores, self.stop = dict(env), cores, stop
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        read, write = os.pipe()
        child_env = {**trial_environ(), **env, "PYTHONUNBUFFERED": "1", STATUS_FD_ENV: str(write),
                     PARENT_PID_ENV: str(os.getpid())}
        if cores is not None:
            child_env[CPU_CORES_ENV] = ",".join(map(str, sorted(cores)))
        if fixed is not None:
            child_env[PRELOAD_ENV] = encode_params(fixed)
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.harness", self.mode, experiment,
                 str(where or log_path.parent)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=child_env,
                pass_fds=(write,), start_new_session=True, cwd=os.getcwd())
        os.close(write)
        os.set_blocking(read, False)
        self.status_fd: int | None = read
        self.ready = False
        self.running_since: float | None = None
        self.at_window = False
        self.measured = False
        self.result_ready = False
        self.returncode: int | None = None
        self.exited_at: float | None = None
        self.rusage: Usage | None = None
        self._buffer = b""
        if stop is not None:
            stop.pgids.add(self.proc.pid)
            if stop.tripped:  # a signal arrived while it was starting
                kill_group(self.proc.pid)
        event("interpreter_spawn")

    @property
    def pid(self) -> int:  # type: ignore[override]  # a property over the base's attribute
        return self.proc.pid

    def read_status(self) -> None:
        if self.status_fd is None:
            return
        while True:
            try:
                chunk = os.read(self.status_fd, 4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:  # EOF: the process (and whatever inherited the pipe) is gone
                os.close(self.status_fd)
                self.status_fd = None
                break
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            status = decode_status(line.decode(errors="replace"))
            if status is not None:
                self._said(status)

    def _said(self, status: StatusLine) -> None:
        if status.pid is not None:  # of a forked trial: a fork server's (``ForkServer``)
            return
        if status.word is Word.READY:
            self.ready = True
            self.running_since = time.monotonic()
            event("interpreter_ready")
        elif status.word is Word.WINDOW:
            self.at_window = True
        elif status.word is Word.MEASURED:
            self.measured = True
        elif status.word is Word.RESULT:
            self.result_ready = True

    def reap(self) -> bool:
        if self.returncode is None:
            try:
                pid, status, rusage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status, rusage = self.proc.pid, 0, None
            if pid:
                self.returncode, self.exited_at = os.waitstatus_to_exitcode(status), time.time()
                self.proc.returncode = self.returncode
                self.rusage = rusage
                kill_group(self.proc.pid)  # grandchildren left in the group
                if self.stop is not None:
                    self.stop.pgids.discard(self.proc.pid)
        return self.returncode is not None

    def send(self, order: Order) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(encode_order(order, self.server).encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died; reap() will say so

    def kill(self) -> None:
        kill_group(self.proc.pid)

    def discard(self) -> None:
        """An interpreter nobody will use: tell it to leave, and make sure it does."""
        self.leave()
        wait_until(self.reap, LEAVE_S)
        self.forget()

    def leave(self) -> None:
        """``discard``'s first step, not waited for: told to leave, and killed."""
        self.send(LEAVE)
        self.kill()

    def forget(self) -> None:
        """``discard``'s last step, once it is reaped (or waited for long enough): its pipes
        close and its log, a spare's, is removed."""
        self.close()
        if self.log_path.exists() and self.log_path.parent.name == SPARES_DIR:
            self.log_path.unlink(missing_ok=True)

    def close(self) -> None:
        if self.status_fd is not None:
            os.close(self.status_fd)
            self.status_fd = None
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still answers kill(0): its state, after the command name, is Z
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1] != "Z"
    except OSError:
        return False


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process (Linux ``/proc``; None elsewhere or once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
