"""What the sweep loop says on stderr besides the trials' lines: a trial quiet for long, a wait for
trials another orchestrator runs or left RUNNING, and why a sweep ended without a feasible result."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.search.stoppolicy import Failures
from orchestrator.store.record import TrialRecord

if TYPE_CHECKING:
    from optuna.study import Study

QUIET_S = float(os.environ.get("ORCHESTRATE_QUIET_S") or 60.0)
"""A trial without a result for this long, or three times the longest trial of this run if that is
more, gets a line (``quiet_notice``), and again every ``QUIET_AGAIN_S``: a hung trial is otherwise
silent until its ``timeout_s`` (15 minutes by default). ``ORCHESTRATE_QUIET_S``: the tests' shorter one."""
QUIET_AGAIN_S = 5 * QUIET_S


def quiet_notice(number: int, run: object, elapsed_s: float, timeout_s: float) -> str:
    """The line for trial ``number`` running ``elapsed_s`` without a result (``run``: its
    ``TrialRun``; a real process's phase and log are named)."""
    phase = getattr(getattr(run, "phase", None), "value", None)
    log = getattr(run, "log_path", None)
    tail = ""
    if log is not None:
        from orchestrator.launch.trial import _last_line

        last = _last_line(Path(log), 120)
        tail = f"; its log: {log}" + (f" (last line: {last!r})" if last else " (empty)")
    took = f"{elapsed_s:.0f} s" if elapsed_s < 120 else f"{elapsed_s / 60:.0f} min"
    return (f"orchestrate: trial #{number} has run {took} without a result"
            + (f" ({phase.replace('_', ' ')})" if phase else "")
            + f"; it is killed at trial.timeout_s={timeout_s:g} s of its own time{tail}")


def stray_notice(numbers: list[int], grace_s: float) -> str:
    """What a sweep waiting for trials left RUNNING without parameters says (``proposer.View``)."""
    which = f"trial {numbers[0]}" if len(numbers) == 1 else "trials " + ", ".join(map(str, numbers))
    return (f"orchestrate: waiting for {which}, left RUNNING without a configuration by an "
            f"orchestrator that died or lost the study's database; it is failed once its heartbeat is "
            f"search.grace_period_s={grace_s:g} s old (longer just after the database restarted)")


ELSEWHERE_S = min(10.0, QUIET_S)
"""How long a sweep with nothing of its own to run waits for other orchestrators' trials before it
says so (``Waiting``): their last trials are a normal end; one that died was silence until its
trial's heartbeat was a grace period old (60 s by default; the PostgreSQL tour: 25 s unexplained)."""


class Waiting:
    """What a sweep with nothing of its own to run says while it waits for trials in flight in
    other orchestrators (``Proposer.elsewhere``) or left RUNNING without parameters (``strays``):
    the strays at once, the others once this wait has lasted ``ELSEWHERE_S``; each trial once (a
    review: a set that shrank as the others' trials ended was said again, line after line)."""

    def __init__(self, grace_s: float, study: Study, owner: str | None) -> None:
        self.grace_s, self.study, self.owner = grace_s, study, owner
        self.since: float | None = None
        """When this wait began (the runner's clock); None while the sweep runs trials of its own."""
        self.told_strays: list[int] = []
        self.told: set[int] = set()

    def say(self, now: float, strays: list[int], elsewhere: list[int], on_notice: Callable[[str], None]) -> None:
        """Called about once a second while the sweep waits (``now``: the runner's clock)."""
        self.since = now if self.since is None else self.since
        if strays and strays != self.told_strays:
            self.told_strays = strays
            on_notice(stray_notice(strays, self.grace_s))
        new = [n for n in elsewhere if n not in self.told]
        if new and now - self.since >= ELSEWHERE_S:
            trials = self.study.get_trials(deepcopy=False)  # who runs them (host:pid), as the study says
            owners = {n: TrialRecord.of(trials[n]).orchestrator or "" for n in new if n < len(trials)}
            owners = {n: o for n, o in owners.items() if o != self.owner}  # a trial of its own told meanwhile
            self.told.update(new)
            if owners:
                on_notice(elsewhere_notice(owners, now - self.since, self.grace_s))


def elsewhere_notice(owners: dict[int, str], waited_s: float, grace_s: float) -> str:
    """The line for a sweep that has waited ``waited_s`` for other orchestrators' trials."""
    which = ", ".join(f"#{n}" + (f" ({owner})" if owner else "") for n, owner in sorted(owners.items()))
    return (f"orchestrate: nothing left to run here; waiting {waited_s:.0f} s so far for trial(s) {which} "
            f"of other orchestrators; one whose orchestrator died is run here once its heartbeat is "
            f"search.grace_period_s={grace_s:g} s old")


def failure_line(failures: Failures, work_dir: Path) -> str:
    """One line for a sweep that ended without a feasible result because trials failed."""
    status, count = max(failures.by_status.items(), key=lambda kv: kv[1])
    detail, log = failures.examples.get(status, ("", ""))
    logs = f"; its log: {log}" if log else f"; logs in {work_dir}"
    if log and not Path(log).exists():
        logs = f"; its log {log} is gone (its folder was deleted)"
    said = f": {detail}" if count == 1 else f"; the first: {detail}"
    return (f"orchestrate: no configuration has a feasible result: {failures.count} trial(s) failed in this "
            f"run, most often with status {status} ({count}x{said if detail else ''}){logs}")
