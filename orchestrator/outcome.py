"""Turn what a trial process left behind into exactly one status. Pure function, table-tested.

``Status`` is the one vocabulary of trial statuses: what ``classify`` returns, what the study
records (``store/record.TrialRecord.status``), what MLflow's ``status`` tag and the reports show.
Its values are the strings stored since the first version, so a study keeps reading the same."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from enum import Enum

from orchestrator.protocol import TrialResult, decode_result


class Status(str, Enum):
    """A trial's status. A ``str`` (``Status.OK == "ok"``), written to the stores as its value."""

    OK = "ok"
    """Measured: the objective metric(s) were reported."""
    OOM = "oom"
    """Ran out of device memory."""
    SWAPPED = "swapped"
    """Fitted only by swapping (unified memory); its metrics are kept, it is not feasible."""
    TIMEOUT = "timeout"
    """No result within ``trial.timeout_s``; the process group was killed."""
    CRASHED = "crashed"
    """Killed by a signal without a result (SIGKILL: often the memory killer)."""
    ERROR = "error"
    """The user's code or environment failed; retried on the next invocation."""
    DIVERGED = "diverged"
    """The loss went non-finite."""
    INTERRUPTED = "interrupted"
    """Cut off (Ctrl-C, SIGTERM, a killed orchestrator, or its fork server's death); runs again on
    the next invocation."""
    SKIPPED = "skipped"
    """Not run: predicted out of memory from a configuration that needs no more memory."""
    REPEAT = "repeat"
    """Not run: answered from the configuration's recorded result (``repeat_of``)."""
    DEFERRED = "deferred"
    """Not run: the configuration is in flight elsewhere or failed in this run (``deferred_to``)."""
    UNKNOWN = "unknown"
    """Read only, never written: a stored status this version does not know (a newer version's)."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__  # type: ignore[assignment]  # f"{status}" is its value, as str() is (Enum's is another signature)

    @classmethod
    def read(cls, stored: object) -> Status | None:
        """The status a store holds: None for none (a trial not told yet), ``UNKNOWN`` for a string
        this version does not know."""
        if stored is None:
            return None
        try:
            return cls(stored)
        except ValueError:
            return cls.UNKNOWN


S = Status
STATUSES = (S.OK, S.OOM, S.SWAPPED, S.TIMEOUT, S.CRASHED, S.ERROR, S.DIVERGED, S.INTERRUPTED)
"""What ``classify`` can return."""
CHILD_STATUSES = (S.OK, S.OOM, S.SWAPPED, S.ERROR, S.DIVERGED)
"""What a trial's result file may say."""
NOT_RUN = (S.SKIPPED, S.REPEAT, S.DEFERRED)
"""Recorded without a process (``skipped`` is still a result; the other two never are)."""

# What each status means to the study (one place, so the loop, the report and recovery agree):
RESULT_STATUSES = (S.OK, S.OOM, S.SWAPPED, S.SKIPPED, S.TIMEOUT, S.CRASHED, S.DIVERGED)
"""Final: they say something about the configuration, which is not run again (unless asked with
``--retry``) and counts toward ``n_trials``."""
RETRIED = (S.ERROR,)
"""Not final: the user's code or environment failed (an exception, a non-zero exit, an unreadable
result). Retried once on each later invocation; never counts toward ``n_trials``."""
RUN_AGAIN = (S.INTERRUPTED,) + RETRIED
"""A configuration whose last attempt ended so runs again on the next invocation (without
``--retry``): cut off, or failed in the user's code."""
COUNTED_FAILURES = (S.ERROR, S.TIMEOUT, S.DIVERGED)
"""Failures that count toward ``search.max_failures`` (with crashes other than SIGKILL, see
``counts_as_failure``); running out of memory never does."""
INFEASIBLE = (S.OOM, S.SWAPPED, S.SKIPPED, S.CRASHED)
"""Told as PRUNED with a violated ``fits_in_memory`` constraint: no invented objective value."""
MEMORY_BOUNDARY = (S.OOM, S.SWAPPED)
"""Evidence for OOM-aware skipping: a configuration that needs at least as much memory fails too."""
NOT_FITTING = MEMORY_BOUNDARY + (S.SKIPPED,)
"""A configuration that did not fit in memory: ran out, swapped, or was predicted to."""

# The detail of an ``interrupted`` trial, by who cut it off (both run again, ``RUN_AGAIN``):
INTERRUPTED_DETAIL = "the orchestrator was stopped during this trial"
"""Ctrl-C or SIGTERM: this orchestrator killed the trial and recorded it."""
DIED_DETAIL = "the orchestrator died during this trial; its configuration is run again"
"""A killed orchestrator left it RUNNING; the next start recorded it (``store/recovery``)."""
SERVER_DIED_DETAIL = "its fork server died during this trial and took it along; its configuration is run again"
"""The slot's fork server died (killed from outside, say) before the trial's result: the trial
ends with its server (``harness/child.watch_parent``), so its measurement, not its configuration,
was lost (``launch/forked.Forked.server_died``)."""
BUDGET_DETAIL = "stopped when search.max_failures was exceeded, with this trial in flight (not its fault)"
"""Another slot's failure spent the budget while it ran: run again on resume (not a failure)."""
VERDICT_DETAIL = "stopped by the search's verdict: its result could not change the answer"
"""The ``auto`` search was done with it in flight (``search/flight``): not run again on resume."""
DISCARDED_DETAIL = ("another orchestrator declared this trial dead (no heartbeat within search.grace_period_s); "
                    "its result was discarded and the trial runs again")
"""A shared study's trial failed as stale by another orchestrator while it ran here (``loop``)."""


@dataclass(frozen=True)
class Outcome:
    """A trial's one status, with what its process wrote (``result.json``, decoded) and what the
    orchestrator saw itself (the signal that killed it; the repeats that made it)."""

    status: Status
    detail: str | None = None
    result: TrialResult | None = None
    """What the trial process wrote; None when it wrote nothing readable (or never ran)."""
    signal: str | None = None
    """``crashed``: the name of the signal that killed the process."""
    processes: int = 1
    """How many processes measured it (``trial.repeats``; fewer when a repeat failed)."""
    repeat_metrics: tuple[dict[str, float], ...] = ()
    """With repeats, all ``ok``: each process's metrics, in the order they ran."""

    @property
    def metrics(self) -> dict[str, float]:
        got = (self.result.metrics if self.result is not None else None) or {}
        return {k: v for k, v in got.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def counts_as_failure(self) -> bool:
        """Whether it counts toward ``search.max_failures``: a SIGKILL is usually the memory killer
        (a boundary, like an OOM), any other crash is a failure."""
        return self.status in COUNTED_FAILURES or (self.status == S.CRASHED and self.signal != "SIGKILL")


def failed_result(status: Status | None, detail: str | None) -> bool:
    """``Outcome.counts_as_failure`` of a stored result (a crash's signal is in its detail): a
    timeout, a divergence, a crash but by SIGKILL (usually the memory killer's: a boundary)."""
    return status in COUNTED_FAILURES or (status == S.CRASHED and not (detail or "").startswith("killed by SIGKILL"))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def classify(returncode: int | None, result_text: str | None, *, timed_out: bool = False,
             interrupted: bool = False, timeout_s: float | None = None,
             log_tail: str | None = None, server_died: bool = False) -> Outcome:
    """``returncode`` is negative for a signal, as ``subprocess`` reports it. ``server_died``: the
    process's exit was never reported because its fork server died first, and the trial with it:
    without a result, cut off (``interrupted``), not a crash of its own whatever ``returncode``
    says; a signal that killed the trial while its server lived (the OOM killer's) is a crash."""
    if interrupted:
        return Outcome(S.INTERRUPTED, INTERRUPTED_DETAIL)
    if timed_out:
        tail = f"; its last output: {log_tail}" if log_tail else ""
        return Outcome(S.TIMEOUT, (f"no result within timeout_s={timeout_s:g}; process group killed"
                                   if timeout_s is not None else "timed out; process group killed") + tail)
    if result_text is not None:
        try:
            result = decode_result(result_text)
        except json.JSONDecodeError as exc:
            return Outcome(S.ERROR, f"the trial wrote an unreadable result file ({exc.__class__.__name__}: {exc})")
        except ValueError as exc:  # JSON, but not an object with a status
            return Outcome(S.ERROR, f"the trial's result file has no valid status ({exc})")
        if result.status not in CHILD_STATUSES:
            return Outcome(S.ERROR, f"the trial's result file has no valid status (got {result.status!r})")
        return Outcome(Status(result.status), result.detail, result)
    if server_died:
        return Outcome(S.INTERRUPTED, SERVER_DIED_DETAIL)
    if returncode is not None and returncode < 0:
        name = signal_name(-returncode)
        hint = " (on macOS usually the memory killer; on Linux possibly the OOM killer)" \
            if -returncode == signal.SIGKILL else ""
        return Outcome(S.CRASHED, f"killed by {name}{hint}", signal=name)
    if returncode:
        tail = f": {log_tail}" if log_tail else ""
        return Outcome(S.ERROR, f"exited with code {returncode} without a result{tail}")
    tail = f"; its last output: {log_tail}" if log_tail else ""
    return Outcome(S.ERROR, "exited with code 0 before its result was written (a script that ends by os._exit "
                   f"leaves the harness no time to write it){tail}")
