"""Trial processes: started ahead of time, given their configuration, watched, and killed with
their whole process group on timeout, on interruption and if the orchestrator dies. Never
imports torch.

A trial still runs in a fresh process (allocators read their settings once, and an OOM must not
poison the next trial); what this module hides is the waiting. Per device slot, a
``SlotLauncher`` keeps spares that have Python, ``import torch``, the harness and the experiment
module loaded, idle on a pipe:

- on Linux a ``ForkServer`` (``python -m orchestrator.harness --fork-server``), which forks one
  process per trial (``Forked``): the import is paid once per slot and environment, not per
  trial. It has touched no device, so each child builds its own allocator;
- elsewhere (macOS: Apple's frameworks are unsafe in a child forked without ``exec``; or
  ``ORCHESTRATE_FORK=0``) one pre-started interpreter per trial (``--serve``), refilled
  ``PRESTART`` at a time.

A trial is given to a spare whose environment equals what the trial needs, else to a new one.
Rules:

- *Allocator settings are read once per process*, some of them as early as ``import torch``
  (torch 2.13.0 source, git cf30153c): a CUDA build's ``libc10_cuda`` reads
  ``PYTORCH_CUDA_ALLOC_CONF`` in a static initializer when the library loads, to choose the
  allocator backend (``c10/cuda/CUDAAllocatorConfig.h``), and parses the rest of it at the first
  ``CUDAAllocatorConfig::instance()``; ``CUDA_VISIBLE_DEVICES`` is read by the driver at
  ``cuInit``, which ``import torch`` does not call (``torch/cuda/__init__.py``, ``_lazy_init``);
  the MPS allocator reads ``PYTORCH_MPS_{HIGH,LOW}_WATERMARK_RATIO`` when it is built, at the
  first MPS allocation (``aten/src/ATen/mps/MPSAllocator.h``, ``init_allocator``), and
  ``PYTORCH_ENABLE_MPS_FALLBACK`` is read at load. Since some are read at import, a pre-started
  interpreter is used only when its whole trial environment (``Interpreter.env``) equals the
  trial's; anything else is discarded and a fresh process started.
- *One trial at a time on a device*: the next trial's configuration is sent only once the
  previous process of the slot has exited (``os.wait4``), so its memory is free.
- *No import beside a timed window*, on any slot of the host (``Host``): a trial stops before its
  window (``window`` on its status pipe) until no pre-started interpreter is importing, then
  ``go``; new interpreters start only while no window runs. Measured on a 2-GPU H200 host with
  imports allowed during windows: launch-bound trials (BERT-base, batch 16-64, fp16/bf16) lost
  up to 40% of their throughput, on one GPU as on two; GPU-bound ones nothing.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable

from orchestrator.faultpoints import reached
from orchestrator.harness.protocol import (CPU_CORES_ENV, FORK_SERVER_FLAG, GO, LEAVE, PARENT_PID_ENV, SERVE_FLAG,
                                           STATUS_FD_ENV, Kind, Order, Status, Word, decode_status, encode_order)
from orchestrator.outcome import Outcome, classify
from orchestrator.timeline import event

POLL_S = 0.05
EXIT_GRACE_S = 20.0
"""A process that wrote its result but has not exited after this long is killed (its result stands)."""
IMPORT_GRACE_S = 120.0
"""A trial's ``timeout_s`` is its process's own time: the wait for its interpreter or its slot's
fork server to finish importing (seconds on a busy machine) is not counted, up to this long; an
import that hangs past it uses up the trial's timeout as any hang does."""
PRESTART = 2
"""Interpreters started at once when a slot has none left: on a small CPU two import in
parallel, which a trial's import alone cannot use."""
SPARES_DIR = ".interpreters"


class StopFlag:
    """Set by SIGINT/SIGTERM handlers; kills every running trial's and spare's process group at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.pgids: set[int] = set()

    def trip(self, signum: int, _frame: Any = None) -> None:
        self.signum = signum
        for pgid in list(self.pgids):
            kill_group(pgid)

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
    started_at: float | None = None
    """Wall clock (``time.time``) when the process was given its configuration."""
    slot_free_at: float | None = None
    """Wall clock when the slot's previous process had exited (None: the slot's first trial)."""


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Interpreter:
    """One trial process (``python -m orchestrator.harness --serve EXPERIMENT``), in its own
    process session, with a status pipe it says it is ready, at its window and done on
    (``orchestrator/harness/protocol.py``)."""

    mode = SERVE_FLAG
    server = False
    """Whether it takes a fork server's orders."""

    def __init__(self, experiment: str, env: dict[str, str], log_path: Path,
                 cores: frozenset[int] | None = None, stop: StopFlag | None = None,
                 where: Path | None = None) -> None:
        """``where``: the study's trial folder, shown on the command line (``ps`` tells whose it is)."""
        self.env, self.cores, self.stop = dict(env), cores, stop
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        read, write = os.pipe()
        child_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1", STATUS_FD_ENV: str(write),
                     PARENT_PID_ENV: str(os.getpid())}
        if cores is not None:
            child_env[CPU_CORES_ENV] = ",".join(map(str, sorted(cores)))
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
        """When it could first run a trial: its imports were done (monotonic clock)."""
        self.at_window = False
        self.result_ready = False
        self.returncode: int | None = None
        self.rusage: Any = None
        self._buffer = b""
        if stop is not None:
            stop.pgids.add(self.proc.pid)
            if stop.tripped:  # a signal arrived while it was starting
                kill_group(self.proc.pid)
        event("interpreter_spawn")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_status(self) -> None:
        """Take what the process said on its status pipe (non-blocking)."""
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

    def _said(self, status: Status) -> None:
        if status.pid is not None:  # of a forked trial: a fork server's (``ForkServer``)
            return
        if status.word is Word.READY:
            self.ready = True
            self.running_since = time.monotonic()
            event("interpreter_ready")
        elif status.word is Word.WINDOW:
            self.at_window = True
        elif status.word is Word.RESULT:
            self.result_ready = True

    def reap(self) -> bool:
        """Whether the process has exited (reaped: its memory is free)."""
        if self.returncode is None:
            try:
                pid, status, rusage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status, rusage = self.proc.pid, 0, None
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
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
        self.send(LEAVE)
        self.kill()
        deadline = time.monotonic() + 5
        while not self.reap() and time.monotonic() < deadline:
            time.sleep(0.01)
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


class ForkServer(Interpreter):
    """Linux: an interpreter that imports once and forks a process per trial
    (``orchestrator/harness/forkserver.py``). It stays the slot's spare across trials; each trial
    it starts is a ``Forked``."""

    mode = FORK_SERVER_FLAG
    server = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trials: dict[int, Forked] = {}
        self.asked: list[Forked] = []
        """Trials asked for, in order, whose pid the server has not said yet."""

    def fork(self, log_path: Path) -> Forked:
        return Forked(self, log_path)

    def _said(self, status: Status) -> None:
        if status.pid is None:
            super()._said(status)
            return
        if status.word is Word.FORKED and self.asked:
            self.asked.pop(0).forked(status.pid)
            return
        trial = self.trials.get(status.pid)
        if trial is None:
            return
        if status.word is Word.WINDOW:
            trial.at_window = True
        elif status.word is Word.RESULT:
            trial.result_ready = True
        elif status.word is Word.EXITED:
            trial.exited(status.code, status.maxrss_kib)  # type: ignore[arg-type]
            del self.trials[status.pid]

    def discard(self) -> None:
        for trial in list(self.trials.values()) + self.asked:
            trial.kill()
        super().discard()


class Forked:
    """One trial process forked by a ``ForkServer``; for ``ProcessRun`` it is an ``Interpreter``
    that never imports. The server reaps it and says how it exited, with its peak RSS."""

    ready = True
    status_fd = None

    def __init__(self, server: ForkServer, log_path: Path) -> None:
        self.server, self.env, self.stop, self.log_path = server, server.env, server.stop, log_path
        self.pid: int | None = None
        self.at_window = self.result_ready = self._kill_when_forked = False
        self.returncode: int | None = None
        self.rusage: Any = None
        self.running_since: float | None = None
        """When the server forked it (the server may still have been importing when it was asked)."""

    def forked(self, pid: int) -> None:
        self.pid = pid
        self.running_since = time.monotonic()
        self.server.trials[pid] = self
        if self.stop is not None:
            self.stop.pgids.add(pid)
        if self._kill_when_forked or (self.stop is not None and self.stop.tripped):
            self.kill()

    def exited(self, code: int, maxrss_kib: int) -> None:
        self.returncode = code
        self.rusage = SimpleNamespace(ru_maxrss=maxrss_kib)  # the server's wait4 (Linux: KiB)
        if self.pid is not None:
            kill_group(self.pid)  # grandchildren left in its group
            if self.stop is not None:
                self.stop.pgids.discard(self.pid)

    def read_status(self) -> None:
        self.server.read_status()

    def reap(self) -> bool:
        if self.returncode is None:
            self.server.read_status()
        if self.returncode is None and self.server.reap():  # the server died: nobody reports it now
            self.server.read_status()
            if self.returncode is None and (self.pid is None or not _alive(self.pid)):
                self.exited(-signal.SIGKILL, 0)
        return self.returncode is not None

    def send(self, order: Order) -> None:
        """Passed on to the server, for this trial (leaving is the server's own business)."""
        if order.kind is Kind.GO:
            if self.pid is not None:
                self.server.send(Order(Kind.GO, pid=self.pid))
        elif order.kind is Kind.RUN:  # fork now
            self.server.asked.append(self)
            self.server.send(Order(Kind.RUN, config=order.config, log=str(self.log_path)))

    def kill(self) -> None:
        if self.pid is None:
            self._kill_when_forked = True
            return
        kill_group(self.pid)
        try:
            os.kill(self.pid, signal.SIGKILL)  # before its setsid, it is in no group of its own
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        pass


def _alive(pid: int) -> bool:
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


def fork_server_usable() -> bool:
    """Trials are forked from a server only on Linux (Apple's frameworks are not safe to use in a
    child forked without ``exec``); ``ORCHESTRATE_FORK=0`` turns it off (benchmarks compare)."""
    return sys.platform.startswith("linux") and os.environ.get("ORCHESTRATE_FORK", "1") != "0"


class ProcessRun:
    """One configuration running in one ``Interpreter``; ``poll`` it until ``exited``."""

    def __init__(self, interp: Interpreter, config: dict[str, Any], trial_dir: Path, timeout_s: float,
                 stop: StopFlag | None, slot_free_at: float | None = None) -> None:
        self.interp, self.trial_dir, self.timeout_s, self.stop = interp, trial_dir, timeout_s, stop
        self.trial = config.get("trial_number")
        self.result_path = trial_dir / "result.json"
        self.log_path = trial_dir / "trial.log"
        self.timed_out = False
        self.spare_cpu_at_go: dict[int, float | None] | None = None
        self.spare_cpu_in_window: float | None = None
        self.window_seen_at: float | None = None
        self.gate_wait_s = 0.0
        """Time held before the window for the slot's interpreters: not the trial's (nor its timeout's)."""
        """CPU seconds the slot's pre-started interpreters used from ``go`` to the result: ~0."""
        self.started = time.monotonic()
        self.result_seen_at: float | None = None
        self.slot_free_at, self.exited_at = slot_free_at, None
        config_path = trial_dir / "config.json"
        config_path.write_text(json.dumps({**config, "result_path": str(self.result_path)}, indent=1,
                                          default=str))
        if interp.log_path != self.log_path:  # a pre-started interpreter: its log becomes the trial's
            try:
                os.replace(interp.log_path, self.log_path)
                interp.log_path = self.log_path
            except OSError:
                pass
        self.started_at = time.time()
        interp.send(Order(Kind.RUN, config=str(config_path)))
        event("start", self.trial)
        reached("trial_running")

    @property
    def exited(self) -> bool:
        return self.interp.returncode is not None

    @property
    def has_result(self) -> bool:
        """The result file is written (the process may still be exiting)."""
        return self.interp.result_ready or self.exited

    def poll(self) -> None:
        self.interp.read_status()
        if self.interp.reap():
            if self.exited_at is None:
                self.exited_at = time.time()
                event("exited", self.trial)
            return
        now = time.monotonic()
        if self.interp.result_ready and self.result_seen_at is None:
            self.result_seen_at = now
        if not self.timed_out and self.interp.at_window and self.window_seen_at is None:
            self.window_seen_at = now
        held = now - self.window_seen_at if self.window_seen_at is not None and self.spare_cpu_at_go is None else 0.0
        if not self.timed_out and now - self.started - self.gate_wait_s - held - self.import_wait(now) > self.timeout_s \
                and not self.interp.result_ready:
            self.timed_out = True
            self.interp.kill()
        if self.result_seen_at is not None and now - self.result_seen_at > EXIT_GRACE_S:
            self.interp.kill()

    def import_wait(self, now: float) -> float:
        """Seconds this trial waited for its process's imports (not its own time), at most
        ``IMPORT_GRACE_S``."""
        since = self.interp.running_since
        return min(max(0.0, (now if since is None else since) - self.started), IMPORT_GRACE_S)

    def kill(self) -> None:
        self.interp.kill()

    def launched(self) -> Launched:
        """The outcome, once ``has_result`` (classified from the result file, or from the exit)."""
        text = self.result_path.read_text(errors="replace") if self.result_path.exists() else None
        rc = self.interp.returncode
        # A trial that ended by itself with a result keeps it even if Ctrl-C came just after.
        interrupted = self.stop is not None and self.stop.tripped and not text
        outcome = classify(rc if self.exited else 0, text, timed_out=self.timed_out and not text,
                           interrupted=interrupted, timeout_s=self.timeout_s, log_tail=_last_line(self.log_path))
        rusage = self.interp.rusage
        maxrss = rusage.ru_maxrss if rusage is not None else None
        peak = None if not maxrss else maxrss / (1024 ** 3 if sys.platform == "darwin" else 1024 ** 2)
        if peak is None:  # told before the process was reaped: its own reading, taken at the result
            peak = outcome.result.get("process_peak_rss_gib")
        end = time.monotonic()
        return Launched(outcome, rc, end - self.started - self.gate_wait_s, peak, self.log_path, self.started_at, self.slot_free_at)


class Host:
    """The slots of one orchestrator together (see the module's rule on imports and windows)."""

    def __init__(self) -> None:
        self.launchers: list[SlotLauncher] = []

    def importing(self) -> bool:
        """Some interpreter of the host is still starting (a spare, or a trial's fresh process)."""
        procs = [s for launcher in self.launchers for s in launcher.spares]
        procs += [launcher.running.interp for launcher in self.launchers if launcher.running is not None]
        return any(not p.ready and not p.at_window and p.returncode is None for p in procs)

    def pending(self) -> bool:
        return any(launcher.pending for launcher in self.launchers)

    def in_window(self) -> bool:
        return any(launcher.running is not None and launcher.running.spare_cpu_at_go is not None
                   and not launcher.running.has_result for launcher in self.launchers)


class SlotLauncher:
    """Starts the trials of one device slot, each in a fresh process, keeping interpreters
    pre-started for the next ones (see the module's rules)."""

    def __init__(self, experiment: str, slot_env: dict[str, str], cores: frozenset[int] | None,
                 spare_dir: Path | None, stop: StopFlag | None, prestart: int = PRESTART,
                 host: Host | None = None, fork: bool | None = None, where: Path | None = None) -> None:
        """``spare_dir``: the study's trial folder, where spares' own logs go (None until the study
        is open: only ``prewarm`` may start one before); ``fork``: keep ``ForkServer`` spares
        (default: where ``fork_server_usable``), else one pre-started interpreter per trial;
        ``where``: on every interpreter's command line (default ``spare_dir``)."""
        self.experiment, self.slot_env, self.cores = experiment, dict(slot_env), cores
        self.spare_dir, self.stop, self.prestart = spare_dir, stop, prestart
        self.where = where or spare_dir
        self.fork = fork_server_usable() if fork is None else fork
        self.host = host or Host()
        self.host.launchers.append(self)
        self.spares: list[Interpreter] = []
        self.pending: list[dict[str, str]] = []
        """Environments of interpreters to start once no window runs on the host."""
        self.running: ProcessRun | None = None
        self.guesses: list[dict[str, str]] = []
        self.discarded = 0
        """Pre-started interpreters thrown away because a trial needed another environment."""

    def full_env(self, env: dict[str, str]) -> dict[str, str]:
        return {**self.slot_env, **env}

    def _spawn(self, env: dict[str, str], log_path: Path | None = None) -> Interpreter:
        """A trial's own interpreter (``log_path``: its trial log) or a spare. A spare's own log
        goes to the study's folder; before that is known (``prewarm``), a fork server's output is
        dropped: a spare's log is deleted when it leaves anyway, and each forked trial writes its
        own."""
        kind = ForkServer if self.fork and log_path is None else Interpreter
        if log_path is None:
            assert self.spare_dir is not None or kind is ForkServer, "a --serve spare's log becomes its trial's"
            log_path = (self.spare_dir / SPARES_DIR / f"{time.monotonic_ns()}.log" if self.spare_dir is not None
                        else Path(os.devnull))
        return kind(self.experiment, env, log_path, self.cores, self.stop, self.where)

    def open(self, spare_dir: Path) -> None:
        """The study is open: spares started from now on keep their logs in its folder."""
        self.spare_dir = spare_dir

    def prewarm(self, env: dict[str, str]) -> None:
        """Start the slot's fork server before its first trial is known (at start-up, while the
        smoke step runs and the stores open, before the study's folder exists), for trials that
        will need ``env``. Fork servers only: a pre-started ``--serve`` interpreter's log is
        renamed into its trial's folder, so it must start in the study's folder."""
        if self.fork and self.prestart and not self.spares and not self.pending:
            self.spares.append(self._spawn(self.full_env(env)))

    def start(self, config: dict[str, Any], trial_dir: Path, env: dict[str, str], timeout_s: float,
              guesses: list[dict[str, str]] | None = None) -> ProcessRun:
        """Run ``config`` now. The slot's previous process must have exited (``idle``)."""
        assert self.idle, "one trial at a time on a device slot"
        trial_dir.mkdir(parents=True, exist_ok=True)
        for stale in (trial_dir / "result.json", trial_dir / "result.json.tmp"):
            stale.unlink(missing_ok=True)
        wanted = self.full_env(env)
        self.guesses = [self.full_env(g) for g in (guesses or [env])]
        spare = next((s for s in self.spares if s.env == wanted and not s.reap()), None)
        interp: Interpreter | Forked
        if spare is None and self.fork and self.prestart:  # one import, for this trial and the next
            spare = self._spawn(wanted)
            self.spares.append(spare)
        if isinstance(spare, ForkServer):  # it stays, for the trials after this one
            interp = spare.fork(trial_dir / "trial.log")
            self.guesses.append(wanted)
        elif spare is not None:
            self.spares.remove(spare)
            interp = spare
        else:
            interp = self._spawn(wanted, trial_dir / "trial.log")
        for s in [s for s in self.spares if s.env not in self.guesses or s.reap()]:
            self.spares.remove(s)
            self.discarded += s.returncode is None
            s.discard()
        previous = self.running.exited_at if self.running is not None else None
        self.running = ProcessRun(interp, config, trial_dir, timeout_s, self.stop, previous)
        if self.fork and self.prestart:  # a server for every environment guessed
            have = [s.env for s in self.spares]
            self.pending = [g for i, g in enumerate(self.guesses) if g not in have and g not in self.guesses[:i]]
        elif not self.spares and self.prestart:  # refill: every guess, at once (see PRESTART)
            self.pending = (self.guesses * self.prestart)[:self.prestart]
        return self.running

    @property
    def idle(self) -> bool:
        return self.running is None or self.running.exited

    def tick(self) -> None:
        """Poll the running trial and the spares; let a trial waiting at its window go once
        every spare is idle (or dead)."""
        if self.pending and not self.host.in_window():
            self.spares += [self._spawn(env) for env in self.pending]
            self.pending = []
        for s in self.spares:
            s.read_status()
            s.reap()
        run = self.running
        if run is None:
            return
        run.poll()
        if run.interp.at_window and run.spare_cpu_at_go is None:
            if not self.host.importing() and not self.host.pending():
                run.spare_cpu_at_go = {s.pid: cpu_seconds(s.pid) for s in self.spares}
                if run.window_seen_at is not None:
                    run.gate_wait_s = time.monotonic() - run.window_seen_at
                run.interp.send(GO)
        if run.has_result and run.spare_cpu_at_go is not None and run.spare_cpu_in_window is None:
            used = [cpu_seconds(pid) - before for pid, before in run.spare_cpu_at_go.items()
                    if before is not None and cpu_seconds(pid) is not None]
            run.spare_cpu_in_window = sum(used)  # type: ignore[arg-type]
            event("spare_cpu", run.trial, seconds=run.spare_cpu_in_window, spares=len(used))

    def fds(self) -> list[int]:
        out = [s.status_fd for s in self.spares if s.status_fd is not None]
        if self.running is not None and self.running.interp.status_fd is not None:
            out.append(self.running.interp.status_fd)
        return out

    def close(self) -> None:
        """End of the sweep: a running trial is killed (and reaped: by its fork server, if it has
        one); the spares leave."""
        self.pending = []
        if self.running is not None and not self.running.exited:
            self.running.kill()
            deadline = time.monotonic() + 5
            while not self.running.interp.reap() and time.monotonic() < deadline:
                time.sleep(0.01)
        if self.running is not None:
            self.running.interp.close()
        for s in self.spares:
            s.discard()
        self.spares.clear()


def wait_for_activity(launchers: Iterable[SlotLauncher], timeout_s: float = POLL_S) -> None:
    """Sleep until a process says something (or exits: its pipe closes), at most ``timeout_s``."""
    fds = [fd for launcher in launchers for fd in launcher.fds()]
    if not fds:
        time.sleep(timeout_s)
        return
    try:
        select.select(fds, [], [], timeout_s)
    except (OSError, ValueError):  # an fd closed meanwhile
        time.sleep(0.001)


def launch_trial(config: dict[str, Any], trial_dir: Path, env: dict[str, str], timeout_s: float,
                 stop: StopFlag | None = None) -> Launched:
    """Run ``config`` in a fresh process and wait for it to exit (no pre-started interpreter)."""
    launcher = SlotLauncher(config["experiment"], {}, None, trial_dir, stop, prestart=0)
    run = launcher.start(config, trial_dir, env, timeout_s)
    try:
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
    finally:
        launcher.close()
    return run.launched()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process (Linux ``/proc``; None elsewhere or once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _last_line(path: Path, limit: int = 300) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:limit] if lines else None
