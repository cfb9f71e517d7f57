"""The trials of one device slot, each in a fresh process, one at a time. Never imports torch.

A ``SlotLauncher`` gives each trial a process from its ``SparePool`` (``spares.py``), polls it,
and lets it open its timed window when the host's gate allows (``host.py``). *One trial at a
time on a device*: the next trial's configuration is sent only once the previous process of the
slot has exited (``os.wait4``), so its memory is free. Its process may be forked, and its device
initialised, before that: once the current trial's window is over (it says ``measured``), the
slot's next process is prepared (``SparePool.prepare_next``), gated like an import; on a host of
several CUDA slots, as the trial starts, its driver alone (``SlotLauncher.early``), its context
once the window is over and none runs on the host.
"""

from __future__ import annotations

import select
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from orchestrator import trialdir
from orchestrator.protocol import TrialConfig
from orchestrator.launch.forked import Forked
from orchestrator.launch.host import Host
from orchestrator.launch.process import LEAVE_S, Interpreter, StopFlag, wait_until
from orchestrator.launch.spares import PRESTART, SparePool
from orchestrator.launch.trial import Launched, ProcessRun

POLL_S = 0.05
KILL_GRACE_S = 5.0
"""How long the end of a sweep waits for a killed trial's process to be reaped (a CUDA process's
memory is freed as it dies: 0.3-1 s on an H100)."""


class SlotLauncher:
    """Starts the trials of one device slot, each in a fresh process, keeping interpreters
    pre-started for the next ones (see the module's rule, and ``spares.py``'s)."""

    def __init__(self, experiment: str, slot_env: dict[str, str], cores: frozenset[int] | None,
                 spare_dir: Path | None, stop: StopFlag | None, prestart: int = PRESTART,
                 host: Host | None = None, fork: bool | None = None, where: Path | None = None,
                 fixed: dict[str, Any] | None = None) -> None:
        """``spare_dir``, ``prestart``, ``fork``, ``where``, ``fixed``: the slot's ``SparePool``'s;
        ``host``: the gate this slot shares with the host's other slots."""
        self.experiment, self.slot_env, self.stop = experiment, dict(slot_env), stop
        self.pool = SparePool(experiment, cores, spare_dir, stop, prestart, fork, where, fixed)
        self.host = host or Host()
        self.host.launchers.append(self)
        self.running: ProcessRun | None = None
        self.prepare_device: str | None = None
        """The device the slot's trials run on, once known (``prepare``): its next trial's
        process is then prepared ahead."""

    @property
    def spares(self) -> list[Interpreter]:
        return self.pool.spares

    @property
    def pending(self) -> list[dict[str, str]]:
        return self.pool.pending

    @pending.setter
    def pending(self, envs: list[dict[str, str]]) -> None:
        self.pool.pending = envs

    @property
    def prepared(self) -> list[Interpreter | Forked]:
        """The process prepared for the slot's next trial, if any (``SparePool.prepared``)."""
        return [self.pool.prepared] if self.pool.prepared is not None else []

    @property
    def gated(self) -> list[Interpreter | Forked]:
        """The prepared process if it makes its device's context (``host.py``'s gate)."""
        return [p for p in self.prepared if not isinstance(p, Forked) or p.context]

    @property
    def prepare_pending(self) -> bool:
        return self.pool.prepare_pending is not None

    @property
    def discarded(self) -> int:
        return self.pool.discarded

    @property
    def spare_dir(self) -> Path | None:
        return self.pool.spare_dir

    @spare_dir.setter
    def spare_dir(self, folder: Path | None) -> None:
        self.pool.spare_dir = folder

    def full_env(self, env: dict[str, str]) -> dict[str, str]:
        return {**self.slot_env, **env}

    def open(self, spare_dir: Path) -> None:
        """The study is open: spares started from now on keep their logs in its folder."""
        self.spare_dir = spare_dir

    def prewarm(self, env: dict[str, str], log_path: Path | None = None) -> Interpreter | None:
        """Start the slot's fork server before its first trial is known (``SparePool.prewarm``)."""
        return self.pool.prewarm(self.full_env(env), log_path)

    def prepare(self, device: str) -> None:
        """Prepare the slot's first trial process now, for ``device`` (start-up: nothing is
        measured yet), and each next one once its predecessor's window is over."""
        self.prepare_device = device
        self.pool.prepare_now(device)

    def start(self, config: TrialConfig, trial_dir: Path, env: dict[str, str], timeout_s: float,
              guesses: list[dict[str, str]] | None = None) -> ProcessRun:
        """Run ``config`` now. The slot's previous process must have exited (``idle``; a process
        prepared for it is used if it is ready by now, else killed: ``SparePool.take``)."""
        assert self.running is None or self.running.exited, "one trial at a time on a device slot"
        trial_dir.mkdir(parents=True, exist_ok=True)
        for stale in (trial_dir / trialdir.RESULT, Path(trialdir.partial(trial_dir / trialdir.RESULT))):
            stale.unlink(missing_ok=True)
        process = self.pool.take(self.full_env(env), [self.full_env(g) for g in (guesses or [env])],
                                 trial_dir / trialdir.LOG, config.params.get("device"))
        previous = self.running.exited_at if self.running is not None else None
        self.running = ProcessRun(process, config, trial_dir, timeout_s, self.stop, previous)
        if self.early:  # the next trial's process starts its driver now, beside this trial
            self.running.prepared_next = True
            self.pool.prepare_driver(str(self.prepare_device))
        return self.running

    @property
    def early(self) -> bool:
        """Whether the slot's next process is forked as its trial starts, its driver alone
        initialised (``SparePool.prepare_driver``): on a host of several CUDA slots, where some
        window nearly always runs and a context made once none does came too late for 62% of
        four H100s' trials, which then started the driver themselves, one process at a time on
        the host (``docs/benchmarks.md``)."""
        return len(self.host.launchers) > 1 and str(self.prepare_device).startswith("cuda")

    @property
    def idle(self) -> bool:
        """The slot's previous process has exited (its memory is free), and the process prepared
        for its next trial, if any, is ready or gone: a trial is given only to a process that has
        initialised its device (``harness/prepared.py``), never to one that may still fail to
        (``SparePool.settled``: not waited for long)."""
        if self.running is not None and not self.running.exited:
            return False
        return self.pool.settled()

    def tick(self) -> None:
        """Poll the running trial and the spares; once the trial's window is over, plan its
        successor's process (``SparePool.prepare_next``: made while the trial writes its result
        and exits); let a trial waiting at its window go once every spare is
        idle (or dead)."""
        run = self.running
        if run is not None:
            run.poll()
            if run.window_over and not run.prepared_next and self.prepare_device is not None:
                run.prepared_next = True
                self.pool.prepare_next(self.prepare_device)
            if run.window_over and not run.context_next and self.early:
                run.context_next = True
                self.pool.context_next()
        if (self.pool.pending or self.prepare_pending) and not self.host.in_window():
            self.pool.start_pending()  # the next trial's process asked for at once, where it may be
        if self.pool.context_pending and not self.host.in_window():
            self.pool.make_context()  # not waited for by any window before it starts
        self.pool.poll()
        if run is None:
            return
        if run.held and not self.host.importing() and not self.host.pending():
            run.go([*self.spares, *self.prepared])

    def fds(self) -> list[int]:
        out = self.pool.fds()
        if self.running is not None and self.running.interp.status_fd is not None:
            out.append(self.running.interp.status_fd)
        return out

    def kill_running(self) -> None:
        """End of the sweep, first step: its running trial, if any, and the process prepared for
        its next one (on CUDA it holds a context) are killed, not waited for (``reaped``), and no
        spare is started any more."""
        self.pool.pending, self.pool.prepare_pending = [], None
        if self.running is not None and not self.running.exited:
            self.running.kill()
        for ready in self.prepared:
            ready.kill()

    def reaped(self) -> bool:
        """Whether its last trial's process and the one prepared for its next, if forked, are gone
        (reaped by its fork server, which says so)."""
        return (self.running is None or self.running.interp.reap()) and \
            all(p.pid is None or p.reap() for p in self.prepared)

    def close(self) -> None:
        """End of the sweep for this slot alone (``end_all``)."""
        end_all([self])

    def release(self) -> None:
        """Once its processes are reaped and its spares gone (``end_all``): its pipes close."""
        if self.running is not None:
            self.running.interp.close()
            self.running.forget_temp()
        self.pool.forget()


def end_all(launchers: Sequence[SlotLauncher]) -> None:
    """End of the sweep: every slot's trial (and process prepared for its next) is killed at once,
    then all are reaped together, waited for at most ``KILL_GRACE_S`` (a CUDA process takes 0.3-1 s
    to die: once for the host, not once a slot); then every slot's spares are told to leave at
    once and reaped together (at most ``LEAVE_S``; four CPU slots closed in 0.07-0.09 s against
    0.12-0.15 s one after another)."""
    for launcher in launchers:
        launcher.kill_running()
    wait_until(lambda: all(launcher.reaped() for launcher in launchers), KILL_GRACE_S)
    for launcher in launchers:
        launcher.pool.leave()
    wait_until(lambda: all(launcher.pool.gone() for launcher in launchers), LEAVE_S)
    for launcher in launchers:
        launcher.release()


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


def launch_trial(config: TrialConfig, trial_dir: Path, env: dict[str, str], timeout_s: float,
                 stop: StopFlag | None = None) -> Launched:
    """Run ``config`` in a fresh process and wait for it to exit (no pre-started interpreter)."""
    launcher = SlotLauncher(config.experiment, {}, None, trial_dir, stop, prestart=0)
    run = launcher.start(config, trial_dir, env, timeout_s)
    try:
        while not run.exited:
            wait_for_activity([launcher])
            launcher.tick()
    finally:
        launcher.close()
    return run.launched()
