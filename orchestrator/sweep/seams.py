"""What the sweep loop needs of the parts it is given (``loop.Sweep``'s constructor): small
Protocols, so that a replay can stand in for the real processes and MLflow.

- ``Runner``: the trials' processes, one at a time per device slot, on a clock of its own:
  ``launch.ProcessRunner`` (real processes, the monotonic clock), or ``replay.ReplayRunner``
  (recorded results on a simulated clock).
- ``TrialRun``: one trial's process as the runner started it: ``launch.ProcessRun``, or a
  replayed one.
- ``TrialTracker``: the trials' MLflow runs, written off the loop's path:
  ``store.tracking.AsyncTracker``, or ``replay.NullTracker`` (nothing written). Its run handle is
  its own business (``RunRef``, a string): the loop only passes it back.
- ``SweepOptions``: what else the loop is told (sharing a study, what the machine allows).
- ``StopFlag`` is no Protocol: the loop is given the real one (``launch.StopFlag``), which a
  replay uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from orchestrator.protocol import TrialConfig
from orchestrator.launch import Launched
from orchestrator.launch.slots import Slot

if TYPE_CHECKING:
    from orchestrator.store.coordination import ProposalLock


class TrialRun(Protocol):
    """One trial's process: polled until it has a result, then asked for it."""

    @property
    def has_result(self) -> bool:
        """Its result is known (its process may still be exiting)."""

    @property
    def exited(self) -> bool:
        """Its process is gone: the slot is free."""

    def poll(self) -> None:
        """Take what the process said (Ctrl-C: the loop settles its jobs with this)."""

    def launched(self) -> Launched:
        """Its outcome, once ``has_result``."""


class Runner(Protocol):
    """Runs trials, one at a time per device slot, each in a process of its own."""

    @property
    def slots(self) -> Sequence[Slot]:
        """The device slots, in order; a trial is started on one by its index."""

    def idle(self, i: int) -> bool:
        """Slot ``i`` has no process: the next trial may start there."""

    def start(self, i: int, config: TrialConfig, trial_dir: Path, env: dict[str, str], timeout_s: float,
              guesses: list[dict[str, str]]) -> TrialRun:
        """Run ``config`` on slot ``i`` now, in ``trial_dir``, with ``env``; ``guesses``: the
        environments of the trials likely next (processes may be started ahead for them)."""

    def wait(self, timeout_s: float) -> None:
        """Until a process says something, at most ``timeout_s`` (on the runner's clock)."""

    def now(self) -> float:
        """The runner's clock, in seconds."""

    def close(self) -> None:
        """Kill what runs and let the processes go."""


class TrialTracker(Protocol):
    """Where each trial's run is recorded (MLflow), off the loop's path."""

    @property
    def down(self) -> BaseException | None:
        """Set once the tracking store gave up (an outage past its limit): the loop raises it."""

    def notice(self) -> str | None:
        """A line, once, when the store first refused a write (the sweep goes on)."""

    def start_trial(self, number: int, params: dict[str, Any], tags: dict[str, str],
                    on_created: Callable[[str], None] | None = None) -> object:
        """Start the trial's run; returns its handle. ``on_created(run_id)`` once it exists."""

    def run_id(self, ref: Any, *, wait: bool = True) -> str | None:
        """The run's id (``wait=False``: None if it does not exist yet)."""

    def finish_trial(self, ref: Any, status: str, metrics: dict[str, float], tags: Mapping[str, object],
                     files: list[tuple[Path, str | None]]) -> None:
        """Finish the trial's run with its status, metrics, tags and files."""


@dataclass(frozen=True)
class SweepOptions:
    """What the loop is told besides its parts; the defaults: one orchestrator on its study,
    nothing known of the machine."""

    lock: ProposalLock | None = None
    """Held from reading what is in flight to writing a new trial (None: ``coordination.NoLock``)."""
    recovery: Any = None
    """A ``recovery.Recovery`` that fails other orchestrators' stale trials (server databases)."""
    superseded: dict[str, int] | None = None
    """Config key -> trial number below which its result does not count (``--retry``)."""
    heartbeat: Callable[[Any], None] | None = None
    """Marks a new trial alive (``coordination.Heartbeat.beat_one``; server databases)."""
    owner: str | None = None
    """``host:pid`` of this orchestrator, recorded on each trial it asks for (shared studies)."""
    memory_limit_gib: float | None = None
    """What a trial may use on the device, where known (the planner's memory model)."""
    native_half: frozenset[str] | None = None
    """The CPU's half precisions with instructions (the planner's dtype prior)."""
    neighbours: bool = True
    """Whether a re-proposed configuration's nearest unmeasured neighbour is queued."""
