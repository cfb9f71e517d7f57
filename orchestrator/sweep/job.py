"""One configuration being measured on a device slot: its trial's life as named states.

    PROPOSED ──slot idle──> RUNNING ──result──> FINISHED
                              │  ▲
               ok, repeats due│  │slot idle: the next process
                              ▼  │
                           REPEATING
    (any state) ──Ctrl-C / SIGTERM──> FINISHED (with what it has) or INTERRUPTED

``Job.advance`` is the one method that moves a job on; the sweep loop (``sweep``) calls it for
every job in flight and acts on the state it returns. A process's repeats run one after another
on the same slot (``trial.repeats``), and the next starts only once the previous has exited, so
trials never share a device.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from orchestrator.protocol import TrialConfig
from orchestrator.launch import Launched
from orchestrator.outcome import INTERRUPTED_DETAIL, Outcome, Status
from orchestrator.sweep.repeats import combine
from orchestrator.sweep.seams import TrialRun
from orchestrator.trialdir import LOG, repeat_path

if TYPE_CHECKING:
    from optuna.trial import Trial


class State(enum.Enum):
    PROPOSED = "proposed"
    """Asked for and recorded (Optuna trial, MLflow run); waiting for its slot to be idle."""
    RUNNING = "running"
    """A process measures it; no result yet."""
    REPEATING = "repeating"
    """One process has an ``ok`` result and more are due; the next starts once it has exited."""
    FINISHED = "finished"
    """Every process it needs has run (or one failed): ``outcome`` combines them."""
    INTERRUPTED = "interrupted"
    """Stopped before it had a result."""


@dataclass
class Job:
    trial: Trial
    sampled: dict[str, Any]
    params: dict[str, Any]
    config: TrialConfig
    env: dict[str, str]
    trial_dir: Path
    slot: int
    run_ref: object
    repeats: int = 1
    state: State = State.PROPOSED
    runs: list[Launched] = field(default_factory=list)
    """Each finished process's outcome, in order."""
    handle: TrialRun | None = None
    """The running process (``launch.ProcessRun`` or a replayed one)."""
    pending: Launched | None = None
    """REPEATING: the last process's result, counted once that process has exited."""

    @property
    def running(self) -> TrialRun:
        """The trial's process: there is one in every state after PROPOSED (RUNNING, REPEATING)."""
        assert self.handle is not None, self.state
        return self.handle

    def advance(self, idle: bool, start: Callable[["Job", Path], TrialRun], stopping: bool = False) -> State:
        """Move on as far as the processes allow. ``idle``: the slot has no process; ``start(job,
        folder)`` starts the next process (a repeat's folder is ``repeat-<k>``); ``stopping``:
        Ctrl-C came, so no new process starts."""
        if self.state is State.PROPOSED and idle:
            if stopping:
                self.state = State.INTERRUPTED
            else:
                self.handle = start(self, repeat_path(self.trial_dir, 1))
                self.state = State.RUNNING
        if self.state is State.RUNNING and self.running.has_result:
            current = self.running.launched()
            if current.outcome.status == Status.OK and len(self.runs) + 1 < self.repeats:
                self.pending, self.state = current, State.REPEATING
            else:
                self.runs.append(current)
                self.state = State.FINISHED
        if self.state is State.REPEATING and self.running.exited and idle:
            self.runs.append(self.pending)  # type: ignore[arg-type]  # REPEATING: a result is pending
            self.pending = None
            if stopping:  # stopped between repeats: start no process only to kill it
                self.runs.append(Launched(Outcome(Status.INTERRUPTED, INTERRUPTED_DETAIL), None, 0.0, None,
                                          self.trial_dir / LOG))
                self.state = State.FINISHED
            else:
                self.handle = start(self, repeat_path(self.trial_dir, len(self.runs) + 1))
                self.state = State.RUNNING
        return self.state

    def settle(self) -> State:
        """Ctrl-C: keep a result that is final (it ended by itself), else mark it interrupted.
        A repeat that was due can no longer run, so an ``ok`` that needed more is interrupted."""
        if self.handle is not None:
            self.handle.poll()
        if self.state is State.RUNNING and self.running.has_result:
            current = self.running.launched()
            status = current.outcome.status
            final = status != Status.INTERRUPTED and (status != Status.OK or len(self.runs) + 1 >= self.repeats)
            if final:
                self.runs.append(current)
                self.state = State.FINISHED
                return self.state
        if self.state is not State.FINISHED:
            self.state = State.INTERRUPTED
        return self.state

    def combined(self, metrics: list[str]) -> Launched:
        """FINISHED: what its processes left, combined into one (``repeats.combine``): the outcome,
        the time, the peak memory."""
        return combine(self.runs, self.repeats, metrics)

    @property
    def started(self) -> bool:
        return self.handle is not None
