"""One trial's run in its process: its configuration written and sent, its process polled, its
timeout counted, its outcome classified. Never imports torch.

A trial's ``timeout_s`` is its process's own time. Not counted: the wait for its process's
imports (a pre-started interpreter or a fork server still importing: seconds on a busy machine,
up to ``IMPORT_GRACE_S``), and the time it is held at its window for the host's other
interpreters (``Host``). A process that has written its result has ``EXIT_GRACE_S`` to exit.

A run's life, as ``Phase`` names it (``ProcessRun.poll`` moves it; the slot's gate calls ``go``):

    IMPORTING --imports done--> SETTING_UP --says window--> HELD --go--> MEASURING --result--> RESULT
        (any but RESULT) --timeout_s of its own time--> TIMED_OUT (killed)

Whether its process has exited (reaped: its memory is free) is the process's own fact: ``exited``.
"""

from __future__ import annotations

import enum
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator import trialdir
from orchestrator.faultpoints import reached
from orchestrator.protocol import GO, Kind, Order, TrialConfig, encode_config
from orchestrator.launch.process import StopFlag, TrialProcess, cpu_seconds
from orchestrator.outcome import Outcome, classify
from orchestrator.timeline import event

EXIT_GRACE_S = 20.0
"""A process that wrote its result but has not exited after this long is killed (its result stands)."""
IMPORT_GRACE_S = 120.0
"""A trial's ``timeout_s`` is its process's own time: the wait for its interpreter or its slot's
fork server to finish importing (seconds on a busy machine) is not counted, up to this long; an
import that hangs past it uses up the trial's timeout as any hang does."""


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


class Phase(enum.Enum):
    """Where a ``ProcessRun`` is in its life (see the module's picture)."""

    IMPORTING = "importing"
    """Its process is still importing: not the trial's time (up to ``IMPORT_GRACE_S``)."""
    SETTING_UP = "setting_up"
    """Its own time: the device, the build, the warm-up."""
    HELD = "held"
    """At its window, held until the host's gate allows it (``go``): not the trial's time."""
    MEASURING = "measuring"
    """Given ``go``: its timed window runs."""
    RESULT = "result"
    """Its result file is written; it has ``EXIT_GRACE_S`` to exit."""
    TIMED_OUT = "timed_out"
    """It used up ``timeout_s`` of its own time without a result, and was killed."""


class ProcessRun:
    """One configuration running in one ``TrialProcess``; ``poll`` it until ``exited``."""

    def __init__(self, interp: TrialProcess, config: TrialConfig, trial_dir: Path, timeout_s: float,
                 stop: StopFlag | None, slot_free_at: float | None = None) -> None:
        self.interp, self.trial_dir, self.timeout_s, self.stop = interp, trial_dir, timeout_s, stop
        self.trial = config.trial_number
        self.result_path = trial_dir / trialdir.RESULT
        self.log_path = trial_dir / trialdir.LOG
        self.started = time.monotonic()
        self.phase = Phase.IMPORTING
        self.since = self.started
        """When (monotonic) it entered its phase."""
        self.gate_wait_s = 0.0
        """Time held before the window for the slot's interpreters: not the trial's (nor its timeout's)."""
        self._ending_logged = False
        """Its log's closing line written (``launched`` may be asked again)."""
        self.spare_cpu_in_window: float | None = None
        """CPU seconds the slot's pre-started interpreters used from ``go`` to the window's end: ~0."""
        self._spare_cpu_at_go: dict[int, float | None] | None = None
        """CPU seconds of each of the slot's pre-started interpreters when ``go`` was sent."""
        self.slot_free_at = slot_free_at
        self._exit_told = False
        self.prepared_next = False
        """Its slot's next process has been planned (once its window was over: ``SlotLauncher.tick``)."""
        self.context_next = False
        """That process, forked as this trial started with its driver alone, was told to make its
        context once no window runs (``SparePool.context_next``)."""
        config_path = trial_dir / trialdir.CONFIG
        self.temp_dir: Path | None = None
        """multiprocessing's folder for the trial's processes (``TrialConfig.temp_dir``), removed
        once its process has exited (``forget_temp``)."""
        try:
            self.temp_dir = Path(trialdir.multiprocessing_folder())
            config_path.write_text(encode_config(replace(config, result_path=str(self.result_path),
                                                         temp_dir=str(self.temp_dir))))
        except OSError:  # a full disk, say: the process it was given is left to nobody, so it goes now
            interp.kill()
            interp.close()
            config_path.unlink(missing_ok=True)  # no half-written configuration left in its folder
            self.forget_temp()
            raise
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
    def exited_at(self) -> float | None:
        """When its process's exit was known, by whichever pipe said it (its own, or its fork
        server's): the next trial of the slot starts from then (``slot_free_at``)."""
        return self.interp.exited_at

    @property
    def has_result(self) -> bool:
        """The result file is written (the process may still be exiting)."""
        return self.interp.result_ready or self.exited

    @property
    def timed_out(self) -> bool:
        return self.phase is Phase.TIMED_OUT

    @property
    def held(self) -> bool:
        """It waits at its window for ``go``."""
        return self.phase is Phase.HELD

    @property
    def window_over(self) -> bool:
        """Its timed window is over (it said ``measured``), or it has its result."""
        return self.interp.measured or self.has_result

    @property
    def in_window(self) -> bool:
        """Its timed window runs (``go`` given, not yet over)."""
        return self.phase is Phase.MEASURING and not self.window_over

    def _enter(self, phase: Phase, now: float) -> None:
        self.phase, self.since = phase, now

    def poll(self) -> None:
        """Take what its process said, and move on: the one method that moves a run's phase
        (but ``go``, which the slot's gate gives)."""
        self.interp.read_status()
        if self.interp.reap():
            if not self._exit_told:
                self._exit_told = True
                event("exited", self.trial)
                self.forget_temp()
            self._count_spares()
            return
        now = time.monotonic()
        if self.phase is Phase.IMPORTING and self.interp.running_since is not None:
            self._enter(Phase.SETTING_UP, now)
        if self.interp.result_ready and self.phase not in (Phase.RESULT, Phase.TIMED_OUT):
            self._enter(Phase.RESULT, now)
        if self.phase in (Phase.IMPORTING, Phase.SETTING_UP) and self.interp.at_window:
            self._enter(Phase.HELD, now)
        held = now - self.since if self.phase is Phase.HELD else 0.0
        if self.phase not in (Phase.RESULT, Phase.TIMED_OUT) and \
                now - self.started - self.gate_wait_s - held - self.import_wait(now) > self.timeout_s:
            self._enter(Phase.TIMED_OUT, now)
            self.interp.kill()
        if self.phase is Phase.RESULT and now - self.since > EXIT_GRACE_S:
            self.interp.kill()
        if self.window_over:  # before the slot forks its next process (``SlotLauncher.tick``)
            self._count_spares()

    def go(self, spares: Sequence[TrialProcess]) -> None:
        """HELD: the host's gate allows its window (``Host``): the time held stops counting
        against it, the ``spares``' CPU is read (their use in the window: ``spare_cpu_in_window``)
        and it is told ``go``."""
        assert self.phase is Phase.HELD, self.phase
        self._spare_cpu_at_go = {s.pid: cpu_seconds(s.pid) for s in spares if s.pid is not None}
        now = time.monotonic()
        self.gate_wait_s = now - self.since
        self._enter(Phase.MEASURING, now)
        self.interp.send(GO)
        event("go", self.trial)

    def _count_spares(self) -> None:
        """At the window's end (``measured``, else the result or the exit) after ``go``: the CPU
        the slot's spares used in the window."""
        if self._spare_cpu_at_go is None or self.spare_cpu_in_window is not None:
            return
        used = [now - before for pid, before in self._spare_cpu_at_go.items()
                if before is not None and (now := cpu_seconds(pid)) is not None]
        self.spare_cpu_in_window = sum(used)
        event("spare_cpu", self.trial, seconds=self.spare_cpu_in_window, spares=len(used))

    def import_wait(self, now: float) -> float:
        """Seconds this trial waited for its process's imports (not its own time), at most
        ``IMPORT_GRACE_S``."""
        since = self.interp.running_since
        return min(max(0.0, (now if since is None else since) - self.started), IMPORT_GRACE_S)

    def kill(self) -> None:
        self.interp.kill()

    def forget_temp(self) -> None:
        """Its ``temp_dir`` removed: its process has exited, and its workers died with it (or the
        sweep ends: ``SlotLauncher.release``)."""
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def launched(self) -> Launched:
        """The outcome, once ``has_result`` (classified from the result file, or from the exit)."""
        text = self.result_path.read_text(errors="replace") if self.result_path.exists() else None
        rc = self.interp.returncode
        # A trial that ended by itself with a result keeps it even if Ctrl-C came just after.
        interrupted = self.stop is not None and self.stop.tripped and not text
        outcome = classify(rc if self.exited else 0, text, timed_out=self.timed_out and not text,
                           interrupted=interrupted, timeout_s=self.timeout_s, log_tail=_last_line(self.log_path),
                           server_died=self.interp.server_died)
        rusage = self.interp.rusage
        maxrss = rusage.ru_maxrss if rusage is not None else None
        peak = None if not maxrss else maxrss / (1024 ** 3 if sys.platform == "darwin" else 1024 ** 2)
        if peak is None:  # told before the process was reaped: its own reading, taken at the result
            peak = outcome.result.process_peak_rss_gib if outcome.result is not None else None
        if not self._ending_logged:  # the log says how its process ended: an ok trial's, a killed one's
            self._ending_logged = True  # were empty (a tour: "trial.log 0B" for a segfault or a timeout)
            _log_ending(self.log_path, outcome, rc)
        duration = time.monotonic() - self.started - self.gate_wait_s
        written = (outcome.result.timeline or {}).get("result_written") if outcome.result is not None else None
        if written is not None and self.started_at is not None:  # read late (a store's outage held the loop):
            duration = min(duration, max(0.0, written - self.started_at - self.gate_wait_s))  # its own time
        return Launched(outcome, rc, duration, peak, self.log_path, self.started_at, self.slot_free_at)


def _log_ending(path: Path, outcome: Outcome, rc: int | None) -> None:
    """One closing line in a trial's log, the orchestrator's: its status and why (never raises)."""
    why = outcome.detail or (f"killed by {outcome.signal}" if outcome.signal else f"exit code {rc}" if rc else "")
    try:
        with open(path, "a") as log:
            log.write(f"orchestrate: trial ended {outcome.status.value}" + (f": {why}" if why else "") + "\n")
    except OSError:
        pass  # its folder gone or full: the status is recorded in the study all the same


def _last_line(path: Path, limit: int = 300) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:limit] if lines else None
